//! The canonical bytes in one hand-written pass, for the JSON producers write.
//!
//! The writer in the parent module drives serde_json's parser through serde's visitor
//! interface: every token is a call through the `Deserializer`/`Visitor` machinery, every
//! key a `Cow`, every number a round trip through `u64`/`f64` and back to text, every token
//! copied to the output on its own. That is correct for any input, and it runs at about a
//! fifth of the speed at which serde_json merely validates the same text. This module is
//! the same writer without the machinery: one cursor over the input, one member stack,
//! and output copied in runs.
//!
//! **Runs.** Most of a payload's text is already canonical: a string without escapes, a
//! short integer, `true`, a comma are written exactly as they were read. So the pass does
//! not copy tokens; it keeps a *pending run*, the input since the last place where the
//! output had to differ, and copies it in one piece when it must: before whitespace it
//! drops, before a token it rewrites (a string with escapes, a number spelled otherwise),
//! and when an object's members arrive out of key order. An object whose members are all
//! canonical text but out of order (every row of a typical result set) is written once, its
//! members straight from the input in key order; an out-of-order object holding rewritten
//! text is rewritten in the output as the other writer does. The top-level object is never
//! sorted here: its members are returned, and the caller assembles them in key order
//! (keeping only the ones it wants).
//!
//! **Giving up.** It does not try to be complete. It handles exactly what it can handle the
//! same way the serde_json-driven writer does, and for anything else it returns `None`,
//! and the caller starts again with that writer, which then decides: the bytes or the
//! error. So its correctness is one-sided and easy to state, and the differential tests
//! state it: whenever this pass returns bytes, they are the bytes the other writer
//! returns. What it handles itself:
//!
//! - whitespace between tokens (dropped), `null`, `true`, `false`;
//! - strings without a backslash, checked free of control characters and checked UTF-8
//!   (what serde_json checks), eight bytes at a time while they are plain ASCII; a string
//!   with escapes is decoded by serde_json itself (the same code as the other writer) and
//!   written as serde_json writes it;
//! - integers of up to 18 digits (19 without a sign), which are canonical as written;
//!   floats of at most 15 significant digits and a decimal exponent of at most 22 either
//!   way (which serde_json's parser reads exactly, to the correctly rounded value), written
//!   as serde_json writes an `f64`; any other number (a longer integer or float, `-0`) is
//!   handed, alone, to the other writer;
//! - objects (a repeated key keeps its last value, as in the other writer) and arrays.
//!
//! It gives up on any grammar error (so every error message comes from serde_json), on
//! nesting deeper than [`MAX_DEPTH`] (below serde_json's limit, which then decides), on an
//! object whose first key starts with serde_json's private prefix, and on trailing text.

use std::borrow::Cow;

use super::{
    Member, key_order_of, prefix_word, prefix_word_within, rewrite_sorted, write_str,
    write_with_serde,
};

/// The deepest nesting this pass follows. serde_json allows 127 levels below the top; a
/// deeper document is handed to the other writer, which applies that limit itself.
const MAX_DEPTH: u32 = 96;

/// The prefix of the keys serde_json reserves (`$serde_json::private::RawValue`,
/// `...::Number`); an object whose first key starts with it is left to the other writer.
const PRIVATE_PREFIX: &[u8] = b"$serde_json::private::";

/// The parse state: a cursor over `json`, the pending run `json[from..at]` (canonical text
/// not yet copied to `out`), the open objects' members.
struct Pass<'a, 'de> {
    json: &'de [u8],
    at: usize,
    from: usize,
    out: &'a mut Vec<u8>,
    members: Vec<Member<'de>>,
    moved: Vec<u8>,
    top: Vec<Member<'de>>,
    order: KeyOrder,
    /// A float as serde_json writes it, to compare with its input.
    number: Vec<u8>,
}

/// The order in which the last out-of-order object's members were written, kept for the
/// next one: the rows of a result set have the same keys in the same order, one after the
/// other, so the sort is done once per run of rows rather than once per row.
#[derive(Default)]
struct KeyOrder {
    /// The keys' prefix words and lengths; empty unless every key is at most eight bytes
    /// (then the word and the length are the whole key).
    shape: Vec<(u64, usize)>,
    /// Member indices in key order, a repeated key's earlier values left out.
    written: Vec<usize>,
}

impl KeyOrder {
    /// The order to write `members` in: the last one's if they have the same keys.
    fn of(&mut self, members: &[Member<'_>]) -> &[usize] {
        let same = self.shape.len() == members.len()
            && members
                .iter()
                .zip(&self.shape)
                .all(|(m, &(prefix, len))| m.prefix == prefix && m.key.len() == len);
        if !same {
            key_order_of(members, &mut self.written);
            self.shape.clear();
            if members.iter().all(|m| m.key.len() <= 8) {
                self.shape
                    .extend(members.iter().map(|m| (m.prefix, m.key.len())));
            }
        }
        &self.written
    }
}

/// Writes the canonical bytes of `json` to `out`, except the top-level object's member
/// order, and returns that object's members (empty when the value is not an object), in
/// arrival order, positioned in `out`; or `None` when this pass gives up (`out` then holds
/// a partial result, which the caller discards).
pub(super) fn write<'de>(json: &'de [u8], out: &mut Vec<u8>) -> Option<Vec<Member<'de>>> {
    if !numbers_are_parsed() {
        return None;
    }
    let mut pass = Pass {
        json,
        at: 0,
        from: 0,
        out,
        members: Vec::new(),
        moved: Vec::new(),
        top: Vec::new(),
        order: KeyOrder::default(),
        number: Vec::new(),
    };
    pass.value(0)?;
    pass.skip_space();
    if pass.at != json.len() {
        return None;
    }
    pass.flush_to(pass.at);
    Some(pass.top)
}

impl<'de> Pass<'_, 'de> {
    fn peek(&self) -> Option<u8> {
        self.json.get(self.at).copied()
    }

    /// Where the cursor's text lands in the output: what was copied plus the pending run.
    fn written(&self) -> usize {
        self.out.len() + (self.at - self.from)
    }

    /// Copies the pending run up to `to` (at most the cursor) and starts the run there.
    fn flush_to(&mut self, to: usize) {
        self.out.extend_from_slice(&self.json[self.from..to]);
        self.from = to;
    }

    /// Ends the pending run before the token at `start` (which is rewritten), the run to
    /// start again after it, at the cursor.
    fn replace_from(&mut self, start: usize) {
        self.flush_to(start);
        self.from = self.at;
    }

    fn skip_space(&mut self) {
        // Compact text has no whitespace at all: one comparison decides (every whitespace
        // byte JSON allows is at most a space).
        if self.peek().is_some_and(|b| b > b' ') {
            return;
        }
        let start = self.at;
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
        if self.at != start {
            self.replace_from(start);
        }
    }

    /// Consumes `byte` after optional whitespace, or gives up.
    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_space();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// One value at the cursor. Inlined where it is used, so a scalar (most values) is
    /// read without a call; an object or an array is a call of its own.
    #[inline(always)]
    fn value(&mut self, depth: u32) -> Option<()> {
        self.skip_space();
        match self.peek()? {
            b'{' => self.object(depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        let found = self.json.get(self.at..end)?;
        // Byte by byte: four or five bytes are not worth a call to `memcmp`.
        found.iter().zip(word).all(|(a, b)| a == b).then_some(())?;
        self.at = end;
        Some(())
    }

    /// A string token at the cursor, its canonical text in the output; returns its text
    /// (UTF-8): borrowed when it has no escape.
    #[inline(always)]
    fn string(&mut self) -> Option<Cow<'de, [u8]>> {
        let open = self.at;
        let mut at = open + 1;
        let mut ascii = true;
        loop {
            // Eight bytes at a time past the plain ASCII that is most of any text, to the
            // first byte that needs a look (the lowest flagged byte is always a real one).
            while let Some(word) = self.json.get(at..at + 8) {
                let flagged = needs_a_look(u64::from_le_bytes(word.try_into().ok()?));
                if flagged != 0 {
                    at += (flagged.trailing_zeros() / 8) as usize;
                    break;
                }
                at += 8;
            }
            match *self.json.get(at)? {
                b'"' => break,
                b'\\' => return self.escaped_string(open),
                0..0x20 => return None,
                0x80.. => ascii = false,
                _ => {}
            }
            at += 1;
        }
        let raw = &self.json[open + 1..at];
        self.at = at + 1;
        // ASCII is UTF-8 as it stands; anything else is checked.
        if !ascii {
            std::str::from_utf8(raw).ok()?;
        }
        Some(Cow::Borrowed(raw))
    }

    /// A string with escapes starting at `open`: its end found by skipping every escaped
    /// byte, its text decoded by serde_json (which checks the escapes and surrogates) and
    /// written as serde_json writes it.
    fn escaped_string(&mut self, open: usize) -> Option<Cow<'de, [u8]>> {
        let mut at = open + 1;
        loop {
            match *self.json.get(at)? {
                b'"' => break,
                b'\\' => at += 2,
                _ => at += 1,
            }
        }
        let token = &self.json[open..=at];
        self.at = at + 1;
        let text: String = serde_json::from_slice(token).ok()?;
        self.replace_from(open);
        write_str(&text, self.out).ok()?;
        Some(Cow::Owned(text.into_bytes()))
    }

    fn digits(&mut self) -> usize {
        let from = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at - from
    }

    fn number(&mut self) -> Option<()> {
        let start = self.at;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let first = self.peek()?;
        let digits = self.digits();
        if digits == 0 || (first == b'0' && digits > 1) {
            return None;
        }
        let (mut fraction, mut exponent, mut exponent_digits) = (None, 0i32, 0);
        if self.peek() == Some(b'.') {
            self.at += 1;
            fraction = Some(self.digits()).filter(|&n| n > 0);
            fraction?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            let sign = match self.peek() {
                Some(b'-') => -1,
                Some(b'+') => 1,
                _ => 0,
            };
            if sign != 0 {
                self.at += 1;
            }
            let from = self.at;
            exponent_digits = self.digits();
            if exponent_digits == 0 {
                return None;
            }
            // Three digits at most are read here; a longer exponent goes to serde_json.
            let text = &self.json[from..self.at];
            exponent = text
                .iter()
                .take(3)
                .fold(0, |e, d| e * 10 + i32::from(d - b'0'));
            exponent *= if sign < 0 { -1 } else { 1 };
        }
        let token = &self.json[start..self.at];
        if fraction.is_none() && exponent_digits == 0 {
            // Canonical as written: an integer that is a u64 or i64 (no `-0`, which
            // serde_json reads as the float -0.0).
            let short = if negative {
                digits <= 18 && first != b'0'
            } else {
                digits <= 19
            };
            if short {
                return Some(());
            }
        } else if exponent_digits <= 3
            && digits + fraction.unwrap_or(0) <= 15
            && (exponent - fraction.unwrap_or(0) as i32).abs() <= 22
        {
            // A float serde_json reads exactly: at most 15 significant digits (so its
            // significand is exact in an f64) scaled by a power of ten it holds exactly
            // (at most 1e22), one IEEE operation, so the correctly rounded value, which is
            // what `str::parse` gives. Written as the other writer writes an f64.
            // Most floats are written as serde_json writes them: those stay in the run.
            let value: f64 = std::str::from_utf8(token).ok()?.parse().ok()?;
            self.number.clear();
            serde_json::to_writer(&mut self.number, &value).ok()?;
            if self.number != token {
                self.replace_from(start);
                self.out.extend_from_slice(&self.number);
            }
            return Some(());
        }
        // The other writer writes this token itself: the same number parsing and the same
        // answer.
        self.replace_from(start);
        write_with_serde(token, self.out).ok().map(drop)
    }

    #[inline(never)]
    fn array(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.skip_space();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.value(depth)?;
            self.skip_space();
            match self.peek()? {
                b',' => self.at += 1,
                b']' => break,
                _ => return None,
            }
        }
        self.at += 1;
        Some(())
    }

    /// One member: its key at the cursor, then `:` and the value.
    fn member(&mut self, depth: u32, base: usize, sorted: &mut bool) -> Option<()> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.written();
        let key_open = self.at;
        let key = self.string()?;
        if self.members.len() == base && key.starts_with(PRIVATE_PREFIX) {
            return None;
        }
        let prefix = match &key {
            // One load from the input, which goes on past the key.
            Cow::Borrowed(text) => prefix_word_within(&self.json[key_open + 1..], text.len()),
            Cow::Owned(text) => prefix_word(text),
        };
        if let Some(last) = self.members[base..].last() {
            *sorted &= last.prefix < prefix || (last.prefix == prefix && last.key < key);
        }
        self.expect(b':')?;
        let value = self.written();
        self.value(depth)?;
        let end = self.written();
        self.members.push(Member {
            key,
            prefix,
            start,
            value,
            end,
        });
        Some(())
    }

    #[inline(never)]
    fn object(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        let open = self.at;
        let open_written = self.written();
        self.at += 1;
        let base = self.members.len();
        let mut sorted = true;
        self.skip_space();
        if self.peek()? != b'}' {
            loop {
                self.skip_space();
                self.member(depth, base, &mut sorted)?;
                self.skip_space();
                match self.peek()? {
                    b',' => self.at += 1,
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        // The cursor is on the closing brace.
        if depth == 1 {
            self.at += 1;
            self.top = self.members.drain(base..).collect();
            return Some(());
        }
        if !sorted {
            self.write_in_key_order(open, open_written, base);
        }
        self.at += 1;
        self.members.truncate(base);
        Some(())
    }

    /// Writes the object opened at input `open` (written at `open_written`), its members
    /// from `base` on, in key order, the cursor on its closing brace.
    fn write_in_key_order(&mut self, open: usize, open_written: usize, base: usize) {
        if self.from <= open {
            // Nothing was copied since the object opened: every member is its input text,
            // which is copied once, in key order, straight from the input.
            // Output position `p` of the run is input position `p - copied + from`.
            let (copied, from) = (self.out.len(), self.from);
            self.flush_to(open);
            let members = &self.members[base..];
            self.out.push(b'{');
            for &at in self.order.of(members) {
                let member = &members[at];
                if self.out.len() > open_written + 1 {
                    self.out.push(b',');
                }
                let text = &self.json[member.start - copied + from..member.end - copied + from];
                self.out.extend_from_slice(text);
            }
        } else {
            self.flush_to(self.at);
            let members = &self.members[base..];
            let order = self.order.of(members);
            rewrite_sorted(self.out, open_written, (members, order), &mut self.moved);
        }
        self.out.push(b'}');
        self.from = self.at + 1;
    }
}

/// Whether serde_json in this build parses numbers into `u64`/`i64`/`f64`, which is what
/// this pass assumes. With its `arbitrary_precision` feature (which any crate in a build
/// can enable) it hands them over as text, the other writer rejects every number, and so
/// this pass gives up on everything. Checked once per thread.
fn numbers_are_parsed() -> bool {
    thread_local! {
        static PARSED: bool = serde_json::from_str::<serde_json::Value>("1E0")
            .and_then(|value| serde_json::to_string(&value))
            .is_ok_and(|text| text == "1.0");
    }
    PARSED.with(|parsed| *parsed)
}

/// The bytes of `word` (eight bytes of input, loaded little-endian) that end a plain run of
/// a string, each flagged by its high bit: a quote, a backslash, a control character (below
/// 0x20) or a non-ASCII byte. The classic "has a zero byte" test on `word` XOR the byte
/// repeated: the *lowest* flagged byte is always a real match (a borrow only propagates
/// upwards from a byte that matches), which is all the caller uses; zero means no byte
/// matches.
fn needs_a_look(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let quote = has_zero(word ^ (ONES * u64::from(b'"')));
    let backslash = has_zero(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    quote | backslash | control | (word & HIGH)
}

#[cfg(test)]
mod tests {
    use super::needs_a_look;

    /// The lowest flagged byte is the first byte that needs a look, for every byte value in
    /// every lane, after any mix of plain bytes and before anything.
    #[test]
    fn the_lowest_flagged_byte_is_the_first_that_needs_a_look() {
        let special = |b: u8| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b);
        for lane in 0..8 {
            for byte in 0..=255u8 {
                for filler in [b'a', b' ', b'~', 0x21, 0x7f] {
                    for after in [b'a', 0, b'"', 0xff, 0x01] {
                        let mut word = [filler; 8];
                        word[lane] = byte;
                        for later in word.iter_mut().skip(lane + 1) {
                            *later = after;
                        }
                        let first = word.iter().position(|&b| special(b));
                        let flagged = needs_a_look(u64::from_le_bytes(word));
                        let found = (flagged != 0).then(|| (flagged.trailing_zeros() / 8) as usize);
                        assert_eq!(found, first, "{word:?}");
                    }
                }
            }
        }
    }
}
