//! The feed's framing, read as a stream: a `u32` big-endian length, then that many bytes of
//! JSON, an array of records. Records are handed over one by one as they are parsed, so the
//! first events of a large frame are indexed before its last byte arrives, and memory stays
//! bounded by one record whatever the frame's size.
//!
//! The scanner is written for this one shape (an array of flat objects) rather than as a
//! general JSON parser, so that a bad record can be skipped and its neighbours kept: a
//! record that is not an object, lacks a field, has a field of the wrong type, carries a
//! payload that is not an event, or whose payload string holds a lone surrogate, is a bad
//! record and the scan goes on with the next one. Only a frame whose *array* is broken (not
//! JSON, trailing bytes, nesting past [`MAX_DEPTH`]) is abandoned, from the point of the
//! damage to the end of the frame, whose length the prefix gave; the next frame is read as
//! usual. A length prefix above the configured cap is an error before anything is
//! allocated or read.
//!
//! A payload is decoded once: its JSON string is unescaped into one scratch buffer that is
//! reused for every record (no `String` per record, no `serde_json::Value`), and
//! [`Event::from_json`](chain_fold::Event::from_json) reads it from there into the event's
//! own allocation, or [`Event::from_json_slim`](chain_fold::Event::from_json_slim) straight
//! to its slim projection ([`FrameReader::decode_as`]).

use std::io::{self, BufRead};

use chain_fold::ExecutionId;
use wal_index::ingest::{DecodeMode, Decoded, RecordError};

/// How deep a skipped value (an unknown field, a non-record) may nest before the frame is
/// abandoned as hostile.
pub const MAX_DEPTH: usize = 64;

/// Caps on what one frame may make the reader hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest frame accepted (default 4 GiB − 2, which admits every length a `u32`
    /// prefix can state but the all-ones one). A larger prefix is
    /// [`FeedError::FrameTooLarge`], before anything is read or allocated.
    pub max_frame_bytes: u64,
    /// The largest unescaped payload (default 64 MiB); a longer one is a bad record, skipped
    /// without being kept.
    pub max_payload_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: u64::from(u32::MAX) - 1,
            max_payload_bytes: 64 << 20,
        }
    }
}

/// Why a frame could not be read at all. The connection it came from is not usable after
/// any of these (the stream's framing is lost).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FeedError {
    /// The length prefix is above [`Limits::max_frame_bytes`].
    #[error("a frame of {len} bytes is over the {max}-byte cap")]
    FrameTooLarge {
        /// The prefix's length.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// The connection failed or ended in the middle of a frame.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// What one frame held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameSummary {
    /// The frame's length in bytes.
    pub bytes: u64,
    /// Records handed over (good and bad).
    pub records: u64,
    /// Records read, handed over or filtered out.
    pub scanned: u64,
    /// The frame's array was broken from some point on; the rest of the frame was skipped.
    pub abandoned: bool,
    /// The read stopped at its scan cap before the frame's end (the input is then no
    /// longer at a frame boundary).
    pub capped: bool,
}

/// Which records a read hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Filter {
    /// Only this execution's records; the others' payloads are skipped without being
    /// unescaped or decoded.
    only: Option<ExecutionId>,
    /// Stop after this many records.
    max_scanned: u64,
}

impl Filter {
    const ALL: Filter = Filter {
        only: None,
        max_scanned: u64::MAX,
    };
}

/// Reads frames and parses their records. One per connection; its scratch buffers are
/// reused for every record.
#[derive(Debug)]
pub struct FrameReader {
    limits: Limits,
    mode: DecodeMode,
    payload: Vec<u8>,
    text: Vec<u8>,
    filter: Filter,
    scanned: u64,
}

/// The body of one frame: a byte source that ends where the frame does.
struct Body<'a, R> {
    input: &'a mut R,
    remaining: u64,
    read: u64,
}

/// Where the body stopped making sense: the rest of the frame is skipped.
#[derive(Debug)]
struct Broken(&'static str);

/// Whether an array read stopped at the scan cap.
struct Capped(bool);

/// A body read: an I/O error ends the frame and the connection; `Broken` only the frame.
enum Fault {
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

type Step<T> = Result<T, Fault>;

/// The connection ended before the frame did.
fn cut_mid_frame() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the connection ended inside a frame",
    )
}

impl<R: BufRead> Body<'_, R> {
    /// The next byte, not consumed; `None` at the frame's end.
    fn peek(&mut self) -> Step<Option<u8>> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let buffered = self.input.fill_buf()?;
        match buffered.first() {
            Some(&byte) => Ok(Some(byte)),
            None => Err(cut_mid_frame().into()),
        }
    }

    fn bump(&mut self) {
        self.input.consume(1);
        self.remaining -= 1;
        self.read += 1;
    }

    /// The next byte, consumed; the frame's end is `Broken`.
    fn next(&mut self) -> Step<u8> {
        let byte = self
            .peek()?
            .ok_or(Broken("the frame ends inside a value"))?;
        self.bump();
        Ok(byte)
    }

    fn skip_whitespace(&mut self) -> Step<()> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek()? {
            self.bump();
        }
        Ok(())
    }

    fn expect(&mut self, byte: u8, why: &'static str) -> Step<()> {
        self.skip_whitespace()?;
        if self.next()? == byte {
            Ok(())
        } else {
            Err(Broken(why).into())
        }
    }

    /// The buffered bytes of the frame from here, at least one unless the frame or the
    /// connection ended.
    fn chunk(&mut self) -> Step<&[u8]> {
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

    fn consume(&mut self, n: usize) {
        self.input.consume(n);
        self.remaining -= n as u64;
        self.read += n as u64;
    }

    /// Discards the rest of the frame.
    fn skip_rest(&mut self) -> io::Result<()> {
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
enum StringFault {
    LoneSurrogate,
    BadEscape,
    ControlCharacter,
    TooLong,
}

impl StringFault {
    fn describe(self) -> &'static str {
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
fn read_string<R: BufRead>(
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

fn push(out: &mut Option<&mut Vec<u8>>, cap: usize, bytes: &[u8], fault: &mut Option<StringFault>) {
    if let Some(out) = out.as_deref_mut() {
        if out.len() + bytes.len() <= cap {
            out.extend_from_slice(bytes);
        } else {
            fault.get_or_insert(StringFault::TooLong);
        }
    }
}

enum Escape {
    Byte(u8),
    Unit(u16),
    Bad,
}

/// One escape after its backslash.
fn read_escape<R: BufRead>(body: &mut Body<'_, R>) -> Step<Escape> {
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
fn read_hex4<R: BufRead>(body: &mut Body<'_, R>) -> Step<Option<u16>> {
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
fn read_low_surrogate<R: BufRead>(body: &mut Body<'_, R>) -> Step<Option<u16>> {
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
fn skip_value<R: BufRead>(body: &mut Body<'_, R>, depth: usize) -> Step<()> {
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
fn read_u64<R: BufRead>(body: &mut Body<'_, R>) -> Step<Option<u64>> {
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

/// The fields of one record, as far as they were read.
#[derive(Default)]
struct Fields {
    global_sequence: Option<u64>,
    execution_id: Option<ExecutionId>,
    payload: bool,
    /// The payload was skipped: the record is another execution's.
    skipped: bool,
    wrong: Option<String>,
}

impl FrameReader {
    /// A reader with these caps.
    pub fn new(limits: Limits) -> FrameReader {
        FrameReader {
            limits,
            mode: DecodeMode::Whole,
            payload: Vec::new(),
            text: Vec::new(),
            filter: Filter::ALL,
            scanned: 0,
        }
    }

    /// Decodes each payload `mode`'s way from the next record on (default: whole). A drain
    /// into a slim index asks for slim events ([`WalSource::decode_as`]), so a record is
    /// parsed once.
    ///
    /// [`WalSource::decode_as`]: wal_index::WalSource::decode_as
    pub fn decode_as(&mut self, mode: DecodeMode) {
        self.mode = mode;
    }

    /// Reads the next frame as [`read_frame`](Self::read_frame) does, handing over only
    /// `execution_id`'s records, and stopping after `max_scanned` records of any execution
    /// (then the input is mid-frame: drop the connection). A record's execution is checked
    /// before its payload is touched: another execution's payload is skipped without being
    /// unescaped or decoded (when the writer sends `execution_id` before `payload`, as it
    /// does; after it, the payload is unescaped but still not decoded). A bad record whose
    /// execution cannot be told is not handed over.
    pub fn read_frame_of<R: BufRead>(
        &mut self,
        input: &mut R,
        execution_id: ExecutionId,
        max_scanned: u64,
        each: impl FnMut(Decoded),
    ) -> Result<Option<FrameSummary>, FeedError> {
        self.filter = Filter {
            only: Some(execution_id),
            max_scanned,
        };
        let read = self.read_frame(input, each);
        self.filter = Filter::ALL;
        read
    }

    /// Reads the next frame from `input`, handing each record to `each` as soon as it is
    /// parsed. `Ok(None)` if the connection ended cleanly before a frame began. A record's
    /// position is its `global_sequence` (for a record without one: the last good sequence
    /// seen before it, so bad records keep log order).
    pub fn read_frame<R: BufRead>(
        &mut self,
        input: &mut R,
        mut each: impl FnMut(Decoded),
    ) -> Result<Option<FrameSummary>, FeedError> {
        let Some(len) = read_prefix(input)? else {
            return Ok(None);
        };
        if len > self.limits.max_frame_bytes {
            return Err(FeedError::FrameTooLarge {
                len,
                max: self.limits.max_frame_bytes,
            });
        }
        self.scanned = 0;
        let mut body = Body {
            input,
            remaining: len,
            read: 0,
        };
        let mut summary = FrameSummary {
            bytes: len,
            ..FrameSummary::default()
        };
        let mut last_sequence = 0;
        let mut records = 0;
        let result = self.read_array(&mut body, &mut |record: Decoded| {
            records += 1;
            if record.event.is_ok() {
                last_sequence = record.position;
            }
            each(record);
        });
        summary.records = records;
        summary.scanned = self.scanned;
        match result {
            Ok(Capped(capped)) => summary.capped = capped,
            Err(Fault::Io(error)) => return Err(error.into()),
            Err(Fault::Broken(Broken(why))) => {
                summary.abandoned = true;
                summary.records += 1;
                each(Decoded {
                    position: last_sequence,
                    event: Err(RecordError::Envelope(format!(
                        "the frame's array is broken at byte {}: {why}; the rest of the frame ({} bytes) was skipped",
                        body.read, body.remaining
                    ))),
                });
                body.skip_rest()?;
            }
        }
        Ok(Some(summary))
    }

    fn read_array<R: BufRead>(
        &mut self,
        body: &mut Body<'_, R>,
        each: &mut dyn FnMut(Decoded),
    ) -> Step<Capped> {
        body.expect(b'[', "a frame is not a JSON array")?;
        body.skip_whitespace()?;
        if body.peek()? == Some(b']') {
            body.bump();
        } else {
            let mut last_good = 0;
            loop {
                if self.scanned >= self.filter.max_scanned {
                    return Ok(Capped(true));
                }
                self.scanned += 1;
                if let Some(record) = self.read_record(body, last_good)? {
                    if record.event.is_ok() {
                        last_good = record.position;
                    }
                    each(record);
                }
                body.skip_whitespace()?;
                match body.next()? {
                    b',' => continue,
                    b']' => break,
                    _ => return Err(Broken("a record is not followed by a comma or `]`").into()),
                }
            }
        }
        body.skip_whitespace()?;
        if body.peek()?.is_some() {
            return Err(Broken("bytes after the frame's array").into());
        }
        Ok(Capped(false))
    }

    /// One record; `None` when the filter leaves it out.
    fn read_record<R: BufRead>(
        &mut self,
        body: &mut Body<'_, R>,
        last_good: u64,
    ) -> Step<Option<Decoded>> {
        body.skip_whitespace()?;
        if body.peek()? != Some(b'{') {
            skip_value(body, 1)?;
            let bad = bad(last_good, "a record is not a JSON object".to_owned());
            return Ok(self.filter.only.is_none().then_some(bad));
        }
        body.bump();
        let mut fields = Fields::default();
        body.skip_whitespace()?;
        if body.peek()? == Some(b'}') {
            body.bump();
        } else {
            loop {
                body.expect(b'"', "an object key is not a string")?;
                let key_fault = read_string(body, Some(&mut self.text), 32)?;
                body.expect(b':', "an object key is not followed by a colon")?;
                body.skip_whitespace()?;
                let key: &[u8] = if key_fault.is_none() { &self.text } else { b"" };
                match key {
                    b"global_sequence" => self.read_sequence(body, &mut fields)?,
                    b"execution_id" => self.read_execution_id(body, &mut fields)?,
                    b"payload" => self.read_payload(body, &mut fields)?,
                    _ => skip_value(body, 1)?,
                }
                body.skip_whitespace()?;
                match body.next()? {
                    b',' => continue,
                    b'}' => break,
                    _ => return Err(Broken("a field is not followed by a comma or `}`").into()),
                }
            }
        }
        Ok(self.finish(fields, last_good))
    }

    fn read_sequence<R: BufRead>(
        &mut self,
        body: &mut Body<'_, R>,
        fields: &mut Fields,
    ) -> Step<()> {
        match body.peek()? {
            Some(b'0'..=b'9') => match read_u64(body)? {
                Some(n) => fields.global_sequence = Some(n),
                None => {
                    fields.wrong.get_or_insert(
                        "`global_sequence` is not an unsigned 64-bit integer".to_owned(),
                    );
                }
            },
            _ => {
                skip_value(body, 1)?;
                fields
                    .wrong
                    .get_or_insert("`global_sequence` is not a number".to_owned());
            }
        }
        Ok(())
    }

    fn read_execution_id<R: BufRead>(
        &mut self,
        body: &mut Body<'_, R>,
        fields: &mut Fields,
    ) -> Step<()> {
        if body.peek()? != Some(b'"') {
            skip_value(body, 1)?;
            fields
                .wrong
                .get_or_insert("`execution_id` is not a string".to_owned());
            return Ok(());
        }
        body.bump();
        let fault = read_string(body, Some(&mut self.text), 32)?;
        let parsed = std::str::from_utf8(&self.text)
            .ok()
            .filter(|_| fault.is_none())
            .and_then(|text| text.parse::<ExecutionId>().ok());
        match parsed {
            Some(id) => fields.execution_id = Some(id),
            None => {
                fields.wrong.get_or_insert(format!(
                    "`execution_id` is not an integer ({:?})",
                    String::from_utf8_lossy(&self.text)
                ));
            }
        }
        Ok(())
    }

    fn read_payload<R: BufRead>(
        &mut self,
        body: &mut Body<'_, R>,
        fields: &mut Fields,
    ) -> Step<()> {
        let other_execution = matches!(
            (self.filter.only, fields.execution_id),
            (Some(only), Some(id)) if id != only
        );
        if other_execution {
            skip_value(body, 1)?;
            fields.skipped = true;
            return Ok(());
        }
        if body.peek()? != Some(b'"') {
            skip_value(body, 1)?;
            fields
                .wrong
                .get_or_insert("`payload` is not a string".to_owned());
            return Ok(());
        }
        body.bump();
        let cap = self.limits.max_payload_bytes;
        match read_string(body, Some(&mut self.payload), cap)? {
            None => fields.payload = true,
            Some(fault) => {
                fields
                    .wrong
                    .get_or_insert(format!("`payload` {}", fault.describe()));
            }
        }
        Ok(())
    }

    /// The record from its fields: the payload decoded, its execution checked against the
    /// record's; `None` when the filter leaves it out.
    fn finish(&mut self, fields: Fields, last_good: u64) -> Option<Decoded> {
        if let Some(only) = self.filter.only {
            // Another execution's record, or one whose execution cannot be told: not this
            // read's, and its payload is not decoded.
            if fields.skipped || fields.execution_id != Some(only) {
                return None;
            }
        }
        Some(self.decode(fields, last_good))
    }

    fn decode(&mut self, fields: Fields, last_good: u64) -> Decoded {
        let position = fields.global_sequence.unwrap_or(last_good);
        if let Some(wrong) = fields.wrong {
            return bad(position, wrong);
        }
        let (Some(_), Some(execution_id), true) =
            (fields.global_sequence, fields.execution_id, fields.payload)
        else {
            let missing = if fields.global_sequence.is_none() {
                "global_sequence"
            } else if fields.execution_id.is_none() {
                "execution_id"
            } else {
                "payload"
            };
            return bad(position, format!("the record has no `{missing}`"));
        };
        let event = match self.mode.decode(&self.payload) {
            Ok(event) => event,
            Err(error) => {
                return Decoded {
                    position,
                    event: Err(error.into()),
                };
            }
        };
        if event.execution_id() != execution_id {
            return bad(
                position,
                format!(
                    "the record's execution_id {execution_id} disagrees with its payload's {}",
                    event.execution_id()
                ),
            );
        }
        Decoded {
            position,
            event: Ok(event),
        }
    }
}

fn bad(position: u64, why: String) -> Decoded {
    Decoded {
        position,
        event: Err(RecordError::Envelope(why)),
    }
}

/// The 4-byte length prefix; `None` on a clean end before it.
fn read_prefix<R: BufRead>(input: &mut R) -> io::Result<Option<u64>> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let buffered = input.fill_buf()?;
        if buffered.is_empty() {
            if got == 0 {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection ended inside a frame's length prefix",
            ));
        }
        let n = buffered.len().min(4 - got);
        prefix[got..got + n].copy_from_slice(&buffered[..n]);
        input.consume(n);
        got += n;
    }
    Ok(Some(u64::from(u32::from_be_bytes(prefix))))
}

/// One frame as the writer sends it: the prefix, then `body`.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(body);
    out
}
