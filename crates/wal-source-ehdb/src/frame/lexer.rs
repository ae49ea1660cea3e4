//! The streaming lexer under [`FrameReader`](super::FrameReader): a frame's body as a
//! byte source bounded by its length prefix, and the JSON tokens a record is made of
//! (strings unescaped into a caller's buffer, unsigned integers, values skipped without
//! recursion past [`MAX_DEPTH`](super::MAX_DEPTH)). It knows nothing of records: what a
//! field means, and when a record is bad, is `frame.rs`'s.

use std::io::{self, BufRead};

use super::MAX_DEPTH;

/// The body of one frame: a byte source that ends where the frame does.
pub(super) struct Body<'a, R> {
    pub(super) input: &'a mut R,
    pub(super) remaining: u64,
    pub(super) read: u64,
}

/// Where the body stopped making sense: the rest of the frame is skipped.
#[derive(Debug)]
pub(super) struct Broken(pub(super) &'static str);

/// Whether an array read stopped at the scan cap.
pub(super) struct Capped(pub(super) bool);

/// A body read: an I/O error ends the frame and the connection; `Broken` only the frame.
pub(super) enum Fault {
    Io(io::Error),
    Broken(Broken),
}

impl From<io::Error> for Fault {
    fn from(error: io::Error) -> Fault {
        Fault::Io(error)
    }
}

impl From<Broken> for Fault {
    fn from(broken: Broken) -> Fault {
        Fault::Broken(broken)
    }
}

pub(super) type Step<T> = Result<T, Fault>;

/// The connection ended before the frame did.
pub(super) fn cut_mid_frame() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the connection ended inside a frame",
    )
}

impl<R: BufRead> Body<'_, R> {
    /// The next byte, not consumed; `None` at the frame's end.
    pub(super) fn peek(&mut self) -> Step<Option<u8>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let buffered = self.input.fill_buf()?;
        match buffered.first() {
            Some(&byte) => Ok(Some(byte)),
            None => Err(cut_mid_frame().into()),
        }
    }

    pub(super) fn bump(&mut self) {
        self.input.consume(1);
        self.remaining -= 1;
        self.read += 1;
    }

    /// The next byte, consumed; the frame's end is `Broken`.
    pub(super) fn next(&mut self) -> Step<u8> {
        let byte = self
            .peek()?
            .ok_or(Broken("the frame ends inside a value"))?;
        self.bump();
        Ok(byte)
    }

    pub(super) fn skip_whitespace(&mut self) -> Step<()> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek()? {
            self.bump();
        }
        Ok(())
    }

    pub(super) fn expect(&mut self, byte: u8, why: &'static str) -> Step<()> {
        self.skip_whitespace()?;
        if self.next()? == byte {
            Ok(())
        } else {
            Err(Broken(why).into())
        }
    }

    /// The buffered bytes of the frame from here, at least one unless the frame or the
    /// connection ended.
    pub(super) fn chunk(&mut self) -> Step<&[u8]> {
        if self.remaining == 0 {
            return Err(Broken("the frame ends inside a string").into());
        }
        let remaining = self.remaining;
        let buffered = self.input.fill_buf()?;
        if buffered.is_empty() {
            return Err(cut_mid_frame().into());
        }
        let len = buffered
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        Ok(&buffered[..len])
    }

    pub(super) fn consume(&mut self, n: usize) {
        self.input.consume(n);
        self.remaining -= n as u64;
        self.read += n as u64;
    }

    /// Discards the rest of the frame.
    pub(super) fn skip_rest(&mut self) -> io::Result<()> {
        while self.remaining > 0 {
            let buffered = self.input.fill_buf()?;
            if buffered.is_empty() {
                return Err(cut_mid_frame());
            }
            let n = buffered
                .len()
                .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
            self.consume(n);
        }
        Ok(())
    }
}

/// What went wrong inside one string: the string was still read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StringFault {
    LoneSurrogate,
    BadEscape,
    ControlCharacter,
    TooLong,
}

impl StringFault {
    pub(super) fn describe(self) -> &'static str {
        match self {
            StringFault::LoneSurrogate => "holds a lone surrogate escape",
            StringFault::BadEscape => "holds an invalid escape",
            StringFault::ControlCharacter => "holds an unescaped control character",
            StringFault::TooLong => "is longer than the cap",
        }
    }
}

/// Reads a JSON string (the opening quote already consumed) to its closing quote, unescaping
/// it into `out` (cleared first) when given, up to `cap` bytes. A fault inside the string is
/// returned after the whole string was read, so the scan can go on after it.
pub(super) fn read_string<R: BufRead>(
    body: &mut Body<'_, R>,
    mut out: Option<&mut Vec<u8>>,
    cap: usize,
) -> Step<Option<StringFault>> {
    if let Some(out) = out.as_deref_mut() {
        out.clear();
    }
    let mut fault = None;
    let note = |f: StringFault, fault: &mut Option<StringFault>| {
        fault.get_or_insert(f);
    };
    loop {
        let chunk = body.chunk()?;
        let stop = memchr::memchr2(b'"', b'\\', chunk).unwrap_or(chunk.len());
        let run = &chunk[..stop];
        if run.iter().any(|&b| b < 0x20) {
            note(StringFault::ControlCharacter, &mut fault);
        }
        if let Some(out) = out.as_deref_mut() {
            if out.len() + run.len() <= cap {
                out.extend_from_slice(run);
            } else {
                note(StringFault::TooLong, &mut fault);
            }
        }
        let at_end = stop < chunk.len();
        let terminator = at_end.then(|| chunk[stop]);
        body.consume(stop);
        match terminator {
            None => continue,
            Some(b'"') => {
                body.bump();
                return Ok(fault);
            }
            Some(_) => {
                body.bump(); // the backslash
                let unit = match read_escape(body)? {
                    Escape::Byte(byte) => {
                        push(&mut out, cap, &[byte], &mut fault);
                        continue;
                    }
                    Escape::Bad => {
                        note(StringFault::BadEscape, &mut fault);
                        continue;
                    }
                    Escape::Unit(unit) => unit,
                };
                let scalar = match unit {
                    0xD800..=0xDBFF => match read_low_surrogate(body)? {
                        Some(low) => {
                            0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
                        }
                        None => {
                            note(StringFault::LoneSurrogate, &mut fault);
                            continue;
                        }
                    },
                    0xDC00..=0xDFFF => {
                        note(StringFault::LoneSurrogate, &mut fault);
                        continue;
                    }
                    unit => u32::from(unit),
                };
                let Some(c) = char::from_u32(scalar) else {
                    note(StringFault::LoneSurrogate, &mut fault);
                    continue;
                };
                let mut utf8 = [0u8; 4];
                push(
                    &mut out,
                    cap,
                    c.encode_utf8(&mut utf8).as_bytes(),
                    &mut fault,
                );
            }
        }
    }
}

pub(super) fn push(
    out: &mut Option<&mut Vec<u8>>,
    cap: usize,
    bytes: &[u8],
    fault: &mut Option<StringFault>,
) {
    if let Some(out) = out.as_deref_mut() {
        if out.len() + bytes.len() <= cap {
            out.extend_from_slice(bytes);
        } else {
            fault.get_or_insert(StringFault::TooLong);
        }
    }
}

pub(super) enum Escape {
    Byte(u8),
    Unit(u16),
    Bad,
}

/// One escape after its backslash.
pub(super) fn read_escape<R: BufRead>(body: &mut Body<'_, R>) -> Step<Escape> {
    Ok(match body.next()? {
        b'"' => Escape::Byte(b'"'),
        b'\\' => Escape::Byte(b'\\'),
        b'/' => Escape::Byte(b'/'),
        b'b' => Escape::Byte(0x08),
        b'f' => Escape::Byte(0x0C),
        b'n' => Escape::Byte(b'\n'),
        b'r' => Escape::Byte(b'\r'),
        b't' => Escape::Byte(b'\t'),
        b'u' => match read_hex4(body)? {
            Some(unit) => Escape::Unit(unit),
            None => Escape::Bad,
        },
        // A quote here would end the string: leave it for the caller to see.
        _ => Escape::Bad,
    })
}

/// Four hex digits; `None` (consuming only the digits seen) if one is not a digit.
pub(super) fn read_hex4<R: BufRead>(body: &mut Body<'_, R>) -> Step<Option<u16>> {
    let mut unit = 0u16;
    for _ in 0..4 {
        let Some(byte) = body.peek()? else {
            return Err(Broken("the frame ends inside a string").into());
        };
        let digit = match byte {
            b'0'..=b'9' => byte - b'0',
            b'a'..=b'f' => byte - b'a' + 10,
            b'A'..=b'F' => byte - b'A' + 10,
            _ => return Ok(None),
        };
        body.bump();
        unit = unit << 4 | u16::from(digit);
    }
    Ok(Some(unit))
}

/// After a high surrogate: the `\uDC00`–`\uDFFF` that completes it, if it comes next.
/// Anything else is left unread (it is the string's next character or escape).
pub(super) fn read_low_surrogate<R: BufRead>(body: &mut Body<'_, R>) -> Step<Option<u16>> {
    if body.peek()? != Some(b'\\') {
        return Ok(None);
    }
    body.bump();
    if body.peek()? != Some(b'u') {
        // Another escape: its first byte is read here, the rest below as a plain escape
        // would be; the surrogate before it is lone either way.
        let _ = read_escape(body)?;
        return Ok(None);
    }
    body.bump();
    match read_hex4(body)? {
        Some(low @ 0xDC00..=0xDFFF) => Ok(Some(low)),
        _ => Ok(None),
    }
}

/// Skips one JSON value of any kind.
pub(super) fn skip_value<R: BufRead>(body: &mut Body<'_, R>, depth: usize) -> Step<()> {
    body.skip_whitespace()?;
    match body.next()? {
        b'"' => {
            read_string(body, None, 0)?;
        }
        open @ (b'{' | b'[') => {
            if depth >= MAX_DEPTH {
                return Err(Broken("values nest too deep").into());
            }
            let close = if open == b'{' { b'}' } else { b']' };
            body.skip_whitespace()?;
            if body.peek()? == Some(close) {
                body.bump();
                return Ok(());
            }
            loop {
                if open == b'{' {
                    body.expect(b'"', "an object key is not a string")?;
                    read_string(body, None, 0)?;
                    body.expect(b':', "an object key is not followed by a colon")?;
                }
                skip_value(body, depth + 1)?;
                body.skip_whitespace()?;
                match body.next()? {
                    b',' => continue,
                    b if b == close => return Ok(()),
                    _ => return Err(Broken("a value is not followed by a comma or a close").into()),
                }
            }
        }
        b'-' | b'0'..=b'9' => {
            while let Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') = body.peek()? {
                body.bump();
            }
        }
        first @ (b't' | b'f' | b'n') => {
            let rest: &[u8] = match first {
                b't' => b"rue",
                b'f' => b"alse",
                _ => b"ull",
            };
            for &expected in rest {
                if body.next()? != expected {
                    return Err(Broken("not a JSON literal").into());
                }
            }
        }
        _ => return Err(Broken("not a JSON value").into()),
    }
    Ok(())
}

/// A JSON number read as an unsigned integer; `None` if it is not one (the number is still
/// consumed).
pub(super) fn read_u64<R: BufRead>(body: &mut Body<'_, R>) -> Step<Option<u64>> {
    let mut value: Option<u64> = Some(0);
    let mut digits = 0;
    while let Some(byte) = body.peek()? {
        match byte {
            b'0'..=b'9' => {
                value = value
                    .and_then(|v| v.checked_mul(10))
                    .and_then(|v| v.checked_add(u64::from(byte - b'0')));
                digits += 1;
            }
            b'.' | b'e' | b'E' | b'+' | b'-' => value = None,
            _ => break,
        }
        body.bump();
    }
    Ok(value.filter(|_| digits > 0))
}
