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
use wal_index::checkpoint::Fingerprint;
use wal_index::ingest::{DecodeMode, Decoded, RecordError};

mod lexer;

use lexer::{Body, Broken, Capped, Fault, Step, read_string, read_u64, skip_value};

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
    /// The frame is the writer's heartbeat, the object `{"heartbeat":true}`.
    pub heartbeat: bool,
    /// The frame is an object this reader does not know (a newer writer's control
    /// frame): it holds no record, and is skipped.
    pub unknown_control: bool,
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
        body.skip_whitespace().map_err(fault_to_feed)?;
        if body.peek().map_err(fault_to_feed)? == Some(b'{') {
            match self.read_control(&mut body) {
                Ok(true) => summary.heartbeat = true,
                Ok(false) => summary.unknown_control = true,
                Err(Fault::Io(error)) => return Err(error.into()),
                Err(Fault::Broken(_)) => summary.unknown_control = true,
            }
            body.skip_rest()?;
            return Ok(Some(summary));
        }
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
                    payload_crc: 0,
                    payload_len: 0,
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

    /// A frame that is an object: the writer's heartbeat (`true`) when it holds
    /// `"heartbeat": true`, else a control frame this reader does not know (`false`).
    fn read_control<R: BufRead>(&mut self, body: &mut Body<'_, R>) -> Step<bool> {
        body.expect(b'{', "a control frame is not a JSON object")?;
        let mut heartbeat = false;
        body.skip_whitespace()?;
        if body.peek()? == Some(b'}') {
            body.bump();
            return Ok(false);
        }
        loop {
            body.skip_whitespace()?;
            body.expect(b'"', "an object key is not a string")?;
            let key_fault = read_string(body, Some(&mut self.text), 32)?;
            body.expect(b':', "an object key is not followed by a colon")?;
            body.skip_whitespace()?;
            if key_fault.is_none() && self.text == b"heartbeat" && body.peek()? == Some(b't') {
                heartbeat = true;
            }
            skip_value(body, 1)?;
            body.skip_whitespace()?;
            match body.next()? {
                b',' => continue,
                b'}' => return Ok(heartbeat),
                _ => return Err(Broken("a field is not followed by a comma or `}`").into()),
            }
        }
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
        // The fingerprint's hash: the payload as the log holds it, whatever the index keeps.
        let payload_crc = Fingerprint::of(position, &self.payload).hash;
        let payload_len = u32::try_from(self.payload.len()).unwrap_or(u32::MAX);
        let event = match self.mode.decode(&self.payload) {
            Ok(event) => event,
            Err(error) => {
                return Decoded {
                    position,
                    payload_crc,
                    payload_len,
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
            payload_crc,
            payload_len,
            event: Ok(event),
        }
    }
}

fn bad(position: u64, why: String) -> Decoded {
    Decoded {
        position,
        payload_crc: 0,
        payload_len: 0,
        event: Err(RecordError::Envelope(why)),
    }
}

/// A fault before the frame's first value: the connection's, or a frame that is neither an
/// array nor an object (read on as an array, which reports it as broken).
fn fault_to_feed(fault: Fault) -> FeedError {
    match fault {
        Fault::Io(error) => error.into(),
        Fault::Broken(Broken(why)) => {
            FeedError::Io(io::Error::new(io::ErrorKind::InvalidData, why))
        }
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
