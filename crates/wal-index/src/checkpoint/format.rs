//! The checkpoint's bytes (docs/checkpoint-format.md is the specification): a magic
//! number and a format version, then blocks, each `kind u8 | length u32 | crc32c u32 |
//! body`, the checksum over the kind, the length and the body. One header block, blocks of
//! executions, one trailer block that counts them. A torn or truncated file has no trailer
//! or a block cut short; a flipped bit fails its block's checksum; so neither verifies.

use std::io;

use chain_fold::{Event, ExecutionId, SpineOrder};

use super::{Checkpoint, ExecutionImage, Fingerprint, IndexShape, LogIdentity, Position, Refusal};

/// The file's first eight bytes.
pub(super) const MAGIC: &[u8; 8] = b"SBIXCKPT";
/// The format this version writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// A block's kind, length and checksum.
const BLOCK_HEADER_BYTES: usize = 1 + 4 + 4;
/// Executions are grouped into blocks of about this many bytes (an execution larger than
/// this is a block of its own).
const TARGET_BLOCK_BYTES: usize = 4 << 20;

/// A spine order's code in the header block.
fn order_code(order: SpineOrder) -> u8 {
    match order {
        SpineOrder::Causal => 0,
        SpineOrder::EventId => 1,
    }
}

/// The spine order a header's code names, if it names one.
fn order_from_code(code: u8) -> Option<SpineOrder> {
    match code {
        0 => Some(SpineOrder::Causal),
        1 => Some(SpineOrder::EventId),
        _ => None,
    }
}

const HEADER: u8 = 1;
const EXECUTIONS: u8 = 2;
const TRAILER: u8 = 3;

/// Encodes `checkpoint` as the bytes of one file.
pub(super) fn encode(checkpoint: &Checkpoint) -> Vec<u8> {
    let images: usize = checkpoint
        .executions
        .iter()
        .flat_map(|e| &e.events)
        .map(Event::image_len)
        .sum();
    // The file's size, so the buffer is never grown: each execution's 20 bytes of header,
    // a block header per block of about `TARGET_BLOCK_BYTES` (one more for a large
    // execution at most per execution), the header's positions and texts, the trailer (in
    // the 4 KiB of slack with the header's fixed fields).
    let positions: usize = checkpoint
        .positions
        .iter()
        .map(|p| 8 + p.partition.len() + 12 * p.records.len())
        .sum();
    let log = &checkpoint.log;
    let texts = 12 + log.transport.len() + log.name.len() + log.detail.len();
    let executions = checkpoint.executions.len();
    let blocks = images / TARGET_BLOCK_BYTES + 1 + executions.min(images / TARGET_BLOCK_BYTES + 1);
    let mut out = Vec::with_capacity(
        images
            + 20 * executions
            + (BLOCK_HEADER_BYTES + 4) * (blocks + 2)
            + positions
            + texts
            + 4096,
    );
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    // Every block is written in place: its header reserved, its body appended, then the
    // header filled in, so the file's buffer is the one copy of the image.
    let mut blocks = 0u32;
    let header = begin_block(&mut out);
    header_body(checkpoint, &mut out);
    end_block(&mut out, header, HEADER);
    blocks += 1;
    let (mut in_block, mut events) = (0u32, 0u64);
    let mut block = begin_block(&mut out);
    out.extend_from_slice(&0u32.to_le_bytes()); // patched with the count
    for execution in &checkpoint.executions {
        out.extend_from_slice(&execution.execution_id.to_le_bytes());
        out.extend_from_slice(&execution.idle_ms.to_le_bytes());
        out.extend_from_slice(&(execution.events.len() as u32).to_le_bytes());
        for event in &execution.events {
            event.write_image(&mut out);
        }
        in_block += 1;
        events += execution.events.len() as u64;
        if out.len() - block - BLOCK_HEADER_BYTES >= TARGET_BLOCK_BYTES {
            end_executions(&mut out, block, in_block);
            blocks += 1;
            block = begin_block(&mut out);
            out.extend_from_slice(&0u32.to_le_bytes());
            in_block = 0;
        }
    }
    if in_block > 0 {
        end_executions(&mut out, block, in_block);
        blocks += 1;
    } else {
        out.truncate(block);
    }
    let trailer = begin_block(&mut out);
    out.extend_from_slice(&(checkpoint.executions.len() as u64).to_le_bytes());
    out.extend_from_slice(&events.to_le_bytes());
    // The blocks before the trailer.
    out.extend_from_slice(&blocks.to_le_bytes());
    end_block(&mut out, trailer, TRAILER);
    out
}

/// Reserves a block's header at the end of `out`; returns where the block starts.
fn begin_block(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; BLOCK_HEADER_BYTES]);
    start
}

/// Ends the block begun at `start` (its body is everything after its header): fills in its
/// kind, length and checksum.
fn end_block(out: &mut [u8], start: usize, kind: u8) {
    let (head, body) = out[start..].split_at_mut(BLOCK_HEADER_BYTES);
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let crc = block_crc(kind, len, body);
    head[0] = kind;
    head[1..5].copy_from_slice(&len.to_le_bytes());
    head[5..9].copy_from_slice(&crc.to_le_bytes());
}

/// Ends a block of executions begun at `start`: its count, then its header.
fn end_executions(out: &mut [u8], start: usize, count: u32) {
    let at = start + BLOCK_HEADER_BYTES;
    out[at..at + 4].copy_from_slice(&count.to_le_bytes());
    end_block(out, start, EXECUTIONS);
}

fn header_body(checkpoint: &Checkpoint, body: &mut Vec<u8>) {
    body.extend_from_slice(&checkpoint.created_unix_ms.to_le_bytes());
    body.push(u8::from(checkpoint.shape.slim));
    body.push(order_code(checkpoint.shape.order));
    for text in [
        &checkpoint.log.transport,
        &checkpoint.log.name,
        &checkpoint.log.detail,
    ] {
        put_text(body, text);
    }
    body.extend_from_slice(&(checkpoint.positions.len() as u32).to_le_bytes());
    for position in &checkpoint.positions {
        put_text(body, &position.partition);
        body.extend_from_slice(&(position.records.len() as u32).to_le_bytes());
        for record in &position.records {
            put_fingerprint(body, record);
        }
    }
}

fn put_text(body: &mut Vec<u8>, text: &str) {
    body.extend_from_slice(&(text.len() as u32).to_le_bytes());
    body.extend_from_slice(text.as_bytes());
}

fn put_fingerprint(body: &mut Vec<u8>, fingerprint: &Fingerprint) {
    body.extend_from_slice(&fingerprint.sequence.to_le_bytes());
    body.extend_from_slice(&fingerprint.hash.to_le_bytes());
}

/// Decodes and verifies one file. Every block's checksum is checked before its body is
/// read; nothing is returned from a file that does not verify whole.
pub(super) fn decode(bytes: &[u8]) -> Result<Checkpoint, Refusal> {
    let preamble = bytes.get(..12).unwrap_or(bytes);
    check_preamble(preamble)?;
    let mut at = 12;
    let (kind, body) = next_block(bytes, &mut at)?;
    let mut checkpoint = header_block(kind, body, at)?;
    // Every block's checksum first, in order; the executions' blocks are decoded once the
    // trailer is found, side by side (each block stands alone).
    let mut executions: Vec<(usize, &[u8])> = Vec::new();
    loop {
        let start = at;
        let (kind, body) = next_block(bytes, &mut at)?;
        match kind {
            EXECUTIONS => executions.push((start, body)),
            TRAILER => {
                let (images, events) = read_blocks(&executions)?;
                let counted = Counted {
                    images: images.len(),
                    events,
                    blocks: executions.len(),
                };
                check_trailer(body, start, counted, at == bytes.len())?;
                checkpoint.executions = images;
                return Ok(checkpoint);
            }
            _ => return Err(unknown_block(start)),
        }
    }
}

/// [`decode`] from a reader, a block at a time into one reused buffer, each block's
/// checksum checked before its body is read: a file is never held whole, so a restore
/// reads at the speed of a copy into a buffer that stays in cache rather than of a fresh
/// allocation the size of the file. A body is read as it arrives (never allocated at the
/// length its header claims). Returns the checkpoint and the bytes read.
pub(super) fn decode_from(reader: &mut dyn io::Read) -> Result<(Checkpoint, u64), Refusal> {
    let mut preamble = Vec::with_capacity(12);
    read_up_to(reader, 12, &mut preamble)?;
    check_preamble(&preamble)?;
    let mut at = 12;
    let mut body = Vec::new();
    let kind = next_block_from(reader, &mut at, &mut body)?;
    let mut checkpoint = header_block(kind, &body, at)?;
    let (mut images, mut events, mut blocks) = (Vec::new(), 0, 0);
    loop {
        let start = at;
        match next_block_from(reader, &mut at, &mut body)? {
            EXECUTIONS => {
                events += read_executions(&body, start, &mut images)?;
                blocks += 1;
            }
            TRAILER => {
                let counted = Counted {
                    images: images.len(),
                    events,
                    blocks,
                };
                let mut rest = Vec::new();
                read_up_to(reader, 1, &mut rest)?;
                check_trailer(&body, start, counted, rest.is_empty())?;
                checkpoint.executions = images;
                return Ok((checkpoint, at as u64));
            }
            _ => return Err(unknown_block(start)),
        }
    }
}

/// The magic number and the format version (`bytes`: the file's first 12, or fewer if it
/// is shorter).
fn check_preamble(bytes: &[u8]) -> Result<(), Refusal> {
    let magic = bytes.get(..8).ok_or(Refusal::Truncated { at: 0 })?;
    if magic != MAGIC {
        return Err(Refusal::NotACheckpoint);
    }
    let version = bytes
        .get(8..12)
        .map(|v| u32::from_le_bytes([v[0], v[1], v[2], v[3]]))
        .ok_or(Refusal::Truncated { at: 8 })?;
    if version != FORMAT_VERSION {
        return Err(Refusal::FormatVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    Ok(())
}

/// The first block, which must be the header.
fn header_block(kind: u8, body: &[u8], at: usize) -> Result<Checkpoint, Refusal> {
    if kind != HEADER {
        return Err(Refusal::Malformed {
            at,
            what: "the first block is not the header",
        });
    }
    read_header(body, at)
}

fn unknown_block(at: usize) -> Refusal {
    Refusal::Malformed {
        at,
        what: "an unknown block kind",
    }
}

/// What the executions' blocks held, for the trailer to confirm.
struct Counted {
    images: usize,
    events: u64,
    blocks: usize,
}

/// The trailer counts what the file holds, and nothing follows it (`at_end`).
fn check_trailer(body: &[u8], start: usize, counted: Counted, at_end: bool) -> Result<(), Refusal> {
    let mut r = Reader {
        body,
        at: 0,
        base: start,
    };
    let (count, events, written) = (r.u64()?, r.u64()?, r.u32()?);
    if count != counted.images as u64
        || events != counted.events
        || written as usize != counted.blocks + 1
        || r.at != body.len()
        || !at_end
    {
        return Err(Refusal::Malformed {
            at: start,
            what: "the trailer does not count what the file holds",
        });
    }
    Ok(())
}

/// Appends up to `n` bytes of `reader` to `into` (fewer only at its end). The buffer grows
/// with the bytes that have arrived, at most doubling what `into` holds, each step to its
/// exact size: never to a length a header claims before its bytes are there, and a reused
/// buffer ends no larger than the largest block it held (a plain `read_to_end` rounds its
/// capacity up to the next power of two).
fn read_up_to(reader: &mut dyn io::Read, n: u64, into: &mut Vec<u8>) -> Result<(), Refusal> {
    const FIRST_STEP: u64 = 64 << 10;
    let mut left = n;
    while left > 0 {
        let step = left.min((into.len() as u64).max(FIRST_STEP));
        // `step` is at most `into.len()` or 64 KiB, so it fits a usize.
        into.try_reserve_exact(step as usize)
            .map_err(|e| Refusal::Io(e.to_string()))?;
        let got = io::Read::read_to_end(&mut io::Read::take(&mut *reader, step), into)
            .map_err(|e| Refusal::Io(e.to_string()))?;
        if (got as u64) < step {
            break;
        }
        left -= step;
    }
    Ok(())
}

/// The block at `*at` of `reader`, read into `body` and its checksum verified; moves `*at`
/// past it. Returns its kind.
fn next_block_from(
    reader: &mut dyn io::Read,
    at: &mut usize,
    body: &mut Vec<u8>,
) -> Result<u8, Refusal> {
    let start = *at;
    body.clear();
    read_up_to(reader, BLOCK_HEADER_BYTES as u64, body)?;
    let head: [u8; BLOCK_HEADER_BYTES] = body[..]
        .try_into()
        .map_err(|_| Refusal::Truncated { at: start })?;
    let kind = head[0];
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    let crc = u32::from_le_bytes([head[5], head[6], head[7], head[8]]);
    body.clear();
    read_up_to(reader, u64::from(len), body)?;
    if body.len() != len as usize {
        return Err(Refusal::Truncated { at: start });
    }
    if block_crc(kind, len, body) != crc {
        return Err(Refusal::Checksum { block_at: start });
    }
    *at = start + BLOCK_HEADER_BYTES + body.len();
    Ok(kind)
}

/// A block's checksum: over its kind, its length and its body.
fn block_crc(kind: u8, len: u32, body: &[u8]) -> u32 {
    let computed = crc32c::crc32c(&[kind]);
    let computed = crc32c::crc32c_append(computed, &len.to_le_bytes());
    crc32c::crc32c_append(computed, body)
}

/// Decodes verified executions' blocks, on up to four threads (the restore's cost is the
/// event images' copies, which parallelize); the executions in file order and the events
/// counted, or the first block's refusal in file order.
fn read_blocks(blocks: &[(usize, &[u8])]) -> Result<(Vec<ExecutionImage>, u64), Refusal> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4)
        .min(blocks.len())
        .max(1);
    let per = blocks.len().div_ceil(threads).max(1);
    let parts: Vec<Result<(Vec<ExecutionImage>, u64), Refusal>> = if threads == 1 {
        vec![read_run(blocks)]
    } else {
        std::thread::scope(|scope| {
            let running: Vec<_> = blocks
                .chunks(per)
                .map(|run| scope.spawn(move || read_run(run)))
                .collect();
            running
                .into_iter()
                .map(|t| {
                    t.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    };
    let mut images = Vec::new();
    let mut events = 0;
    for part in parts {
        let (part, counted) = part?;
        images.extend(part);
        events += counted;
    }
    Ok((images, events))
}

/// Decodes consecutive blocks on one thread.
fn read_run(blocks: &[(usize, &[u8])]) -> Result<(Vec<ExecutionImage>, u64), Refusal> {
    let mut images = Vec::new();
    let mut events = 0;
    for &(start, body) in blocks {
        events += read_executions(body, start, &mut images)?;
    }
    Ok((images, events))
}

/// The block at `*at`, its checksum verified; moves `*at` past it.
fn next_block<'b>(bytes: &'b [u8], at: &mut usize) -> Result<(u8, &'b [u8]), Refusal> {
    let start = *at;
    let head = bytes
        .get(start..start + BLOCK_HEADER_BYTES)
        .ok_or(Refusal::Truncated { at: start })?;
    let kind = head[0];
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
    let crc = u32::from_le_bytes([head[5], head[6], head[7], head[8]]);
    let body_start = start + BLOCK_HEADER_BYTES;
    let body = bytes
        .get(body_start..body_start + len as usize)
        .ok_or(Refusal::Truncated { at: start })?;
    if block_crc(kind, len, body) != crc {
        return Err(Refusal::Checksum { block_at: start });
    }
    *at = body_start + body.len();
    Ok((kind, body))
}

fn read_header(body: &[u8], base: usize) -> Result<Checkpoint, Refusal> {
    let mut r = Reader { body, at: 0, base };
    let created_unix_ms = r.u64()?;
    let slim = r.u8()? != 0;
    let order = order_from_code(r.u8()?).ok_or(Refusal::Malformed {
        at: base,
        what: "an unknown spine order",
    })?;
    let log = LogIdentity {
        transport: r.text()?,
        name: r.text()?,
        detail: r.text()?,
    };
    let count = r.u32()?;
    // Each position takes at least 20 bytes (a text's length, a count, one fingerprint): a
    // count past the body is a lie, not an allocation.
    if count as usize > body.len() / 20 {
        return Err(Refusal::Malformed {
            at: base,
            what: "more positions than the header holds",
        });
    }
    let mut positions = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let partition = r.text()?;
        let n = r.u32()? as usize;
        if n == 0 || n > (body.len() - r.at) / 12 {
            return Err(Refusal::Malformed {
                at: base,
                what: "a position's count of records",
            });
        }
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            records.push(r.fingerprint()?);
        }
        if records.windows(2).any(|w| w[0].sequence >= w[1].sequence) {
            return Err(Refusal::Malformed {
                at: base,
                what: "a position's records out of order",
            });
        }
        positions.push(Position { partition, records });
    }
    if r.at != body.len() {
        return Err(Refusal::Malformed {
            at: base,
            what: "bytes after the header's fields",
        });
    }
    Ok(Checkpoint {
        created_unix_ms,
        shape: IndexShape { slim, order },
        log,
        positions,
        executions: Vec::new(),
    })
}

/// Appends a block's executions; returns how many events it held.
fn read_executions(
    body: &[u8],
    base: usize,
    into: &mut Vec<ExecutionImage>,
) -> Result<u64, Refusal> {
    let mut r = Reader { body, at: 0, base };
    let count = r.u32()?;
    let mut events_read = 0u64;
    for _ in 0..count {
        let execution_id: ExecutionId = r.u64()? as i64;
        let idle_ms = r.u64()?;
        let n = r.u32()? as usize;
        // An image takes at least its fixed part: a count past the body is a lie.
        if n > (body.len() - r.at) / Event::IMAGE_FIXED_BYTES {
            return Err(Refusal::Malformed {
                at: base,
                what: "more events than the block holds",
            });
        }
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            let (event, used) =
                Event::read_image(&body[r.at..]).map_err(|why| Refusal::Image { at: base, why })?;
            if event.execution_id() != execution_id {
                return Err(Refusal::Malformed {
                    at: base,
                    what: "an event of another execution",
                });
            }
            r.at += used;
            events.push(event);
        }
        events_read += n as u64;
        into.push(ExecutionImage {
            execution_id,
            idle_ms,
            events,
        });
    }
    if r.at != body.len() {
        return Err(Refusal::Malformed {
            at: base,
            what: "bytes after a block's executions",
        });
    }
    Ok(events_read)
}

/// A bounds-checked cursor over a verified block's body.
struct Reader<'b> {
    body: &'b [u8],
    at: usize,
    /// Where the block starts in the file, for errors.
    base: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Refusal> {
        let bytes = self
            .body
            .get(self.at..self.at + N)
            .ok_or(Refusal::Malformed {
                at: self.base,
                what: "a field past the block's end",
            })?;
        self.at += N;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, Refusal> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, Refusal> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, Refusal> {
        self.take().map(u64::from_le_bytes)
    }
    fn text(&mut self) -> Result<String, Refusal> {
        let len = self.u32()? as usize;
        let bytes = self
            .body
            .get(self.at..self.at + len)
            .ok_or(Refusal::Malformed {
                at: self.base,
                what: "a text past the block's end",
            })?;
        self.at += len;
        String::from_utf8(bytes.to_vec()).map_err(|_| Refusal::Malformed {
            at: self.base,
            what: "a text that is not UTF-8",
        })
    }
    fn fingerprint(&mut self) -> Result<Fingerprint, Refusal> {
        Ok(Fingerprint {
            sequence: self.u64()?,
            hash: self.u32()?,
        })
    }
}
