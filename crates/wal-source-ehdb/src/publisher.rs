//! [`EhdbPublisher`]: records into the writer's ingest face, each acknowledged durably.

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::frame::frame;

/// One connection to the writer's ingest face. Per record it sends a frame holding the
/// record's JSON and reads back 8 bytes, the record's `global_sequence` big-endian: the
/// writer's durable acknowledgement. The caller chooses each record's `global_sequence`
/// (ascending within a shard, as the log requires); [`EhdbPublisher::publish`] returns what
/// the writer acknowledged.
///
/// For tools and tests (the simulator publishes its workload through it); a control plane
/// publishes through its own client.
#[derive(Debug)]
pub struct EhdbPublisher {
    input: BufReader<TcpStream>,
    output: BufWriter<TcpStream>,
    json: Vec<u8>,
}

impl EhdbPublisher {
    /// Connects to the ingest face at `addr` (`HOST:PORT`), waiting at most `timeout` for
    /// the connection and for each acknowledgement.
    pub fn connect(addr: &str, timeout: Duration) -> io::Result<EhdbPublisher> {
        let stream = crate::connect::dial(addr, crate::connect::after(timeout))?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(EhdbPublisher {
            input: BufReader::new(stream.try_clone()?),
            output: BufWriter::new(stream),
            json: Vec::new(),
        })
    }

    /// Publishes one record and returns the acknowledged `global_sequence`. An error means
    /// the record may or may not be stored: publish it again (the log keeps one record
    /// per sequence only if the writer deduplicates; this writer version appends, so a
    /// re-sent record is stored twice, which the index absorbs as an overwrite).
    pub fn publish(
        &mut self,
        global_sequence: u64,
        execution_id: i64,
        transaction_id: &str,
        payload: &str,
    ) -> io::Result<u64> {
        self.json.clear();
        self.json.extend_from_slice(
            format!(r#"{{"global_sequence":{global_sequence},"execution_id":"{execution_id}","transaction_id":"#)
                .as_bytes(),
        );
        escape_into(&mut self.json, transaction_id);
        self.json.extend_from_slice(br#","payload":"#);
        escape_into(&mut self.json, payload);
        self.json.push(b'}');
        self.output.write_all(&frame(&self.json))?;
        self.output.flush()?;
        let mut ack = [0u8; 8];
        self.input.read_exact(&mut ack)?;
        Ok(u64::from_be_bytes(ack))
    }
}

/// `text` as a JSON string: quotes, backslashes and control characters escaped.
fn escape_into(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    for &byte in text.as_bytes() {
        match byte {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0..0x20 => out.extend_from_slice(format!("\\u{byte:04x}").as_bytes()),
            _ => out.push(byte),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_escapes_as_json_does() {
        let text = "a\"b\\c\nd\u{1}é😀";
        let mut out = Vec::new();
        escape_into(&mut out, text);
        let back: String = serde_json::from_slice(&out).unwrap();
        assert_eq!(back, text);
    }
}
