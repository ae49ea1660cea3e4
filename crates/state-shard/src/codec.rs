//! A shard's bytes: an Arrow IPC **stream** (not the file format, despite the `.feather`
//! name) of one record batch with production's eight columns (noetl/worker's
//! `src/state_materializer.rs`, v5.120.0, through noetl/tools' `src/arrow_codec.rs`).

use std::borrow::Borrow;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_buffer::Buffer;
use arrow_ipc::reader::StreamDecoder;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};

use crate::error::ShardError;
use crate::row::ShardRow;

/// The columns, in production's order.
pub const COLUMNS: [&str; 8] = [
    "event_id",
    "prev_event_id",
    "event_type",
    "node_name",
    "status",
    "result_ref",
    "extracted",
    "payload",
];

/// Encodes `rows` (ascending by `event_id`, one per id) as production's writer does: the
/// schema, one record batch with every row, the end-of-stream marker; every field
/// nullable, no metadata; `prev_event_id` typed Int64 unless every row's is null, then
/// Utf8 (all null), as production's type inference gives. `None` for no rows: production
/// writes nothing then.
pub fn encode<R: Borrow<ShardRow>>(rows: &[R]) -> Result<Option<Vec<u8>>, ArrowError> {
    if rows.is_empty() {
        return Ok(None);
    }
    let rows: Vec<&ShardRow> = rows.iter().map(Borrow::borrow).collect();
    let all_null_prev = rows.iter().all(|r| r.prev_event_id.is_none());
    let prev_type = if all_null_prev {
        DataType::Utf8
    } else {
        DataType::Int64
    };
    let schema = Arc::new(Schema::new(
        COLUMNS
            .iter()
            .map(|&name| {
                let data_type = match name {
                    "event_id" => DataType::Int64,
                    "prev_event_id" => prev_type.clone(),
                    _ => DataType::Utf8,
                };
                Field::new(name, data_type, true)
            })
            .collect::<Vec<_>>(),
    ));
    let text = |f: fn(&ShardRow) -> Option<&str>| -> ArrayRef {
        Arc::new(rows.iter().map(|r| f(r)).collect::<StringArray>())
    };
    let prev: ArrayRef = if all_null_prev {
        Arc::new(StringArray::new_null(rows.len()))
    } else {
        Arc::new(rows.iter().map(|r| r.prev_event_id).collect::<Int64Array>())
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(
            rows.iter()
                .map(|r| Some(r.event_id))
                .collect::<Int64Array>(),
        ),
        prev,
        text(|r| Some(r.event_type.as_str())),
        text(|r| r.node_name.as_deref()),
        text(|r| r.status.as_deref()),
        text(|r| r.result_ref.as_deref()),
        text(|r| r.extracted.as_deref()),
        text(|r| Some(r.payload.as_str())),
    ];
    let batch = RecordBatch::try_new(Arc::clone(&schema), columns)?;
    let mut writer = StreamWriter::try_new(Vec::new(), &schema)?;
    writer.write(&batch)?;
    writer.finish()?;
    writer.into_inner().map(Some)
}

/// A decoded shard: its schema and its record batches (production writes one; a reader
/// takes any number).
#[derive(Debug, Clone)]
pub struct DecodedShard {
    /// The stream's schema.
    pub schema: SchemaRef,
    /// Its batches, in order.
    pub batches: Vec<RecordBatch>,
}

/// Decodes an Arrow IPC stream held whole in memory. Nothing is allocated beyond what
/// `bytes` holds: a message or body whose declared length runs past the end is a
/// truncated stream, not an allocation, and a batch that declares more rows than the
/// stream has bytes is refused. A stream without its end-of-stream marker is
/// accepted when it ends between messages (a writer that stopped after the last batch),
/// and refused when it ends inside one.
pub fn decode(bytes: &[u8]) -> Result<DecodedShard, ShardError> {
    let mut buffer = Buffer::from(bytes.to_vec());
    let mut decoder = StreamDecoder::new();
    let mut batches = Vec::new();
    while !buffer.is_empty() {
        match decoder.decode(&mut buffer) {
            // A batch without buffers (no columns, or only Null ones) may declare any row
            // count; one that declares more rows than the stream has bytes is refused, so no
            // later step sizes anything from a count the bytes do not hold.
            Ok(Some(batch)) if batch.num_rows() > bytes.len() => {
                return Err(ShardError::Decode(format!(
                    "a batch declares {} rows in a stream of {} bytes",
                    batch.num_rows(),
                    bytes.len()
                )));
            }
            Ok(Some(batch)) => batches.push(batch),
            Ok(None) => {}
            Err(error) => return Err(ShardError::Decode(error.to_string())),
        }
    }
    decoder
        .finish()
        .map_err(|error| ShardError::Decode(error.to_string()))?;
    let schema = decoder
        .schema()
        .ok_or_else(|| ShardError::Decode("the stream holds no schema".into()))?;
    Ok(DecodedShard { schema, batches })
}

impl DecodedShard {
    /// Rows in every batch.
    pub fn rows(&self) -> usize {
        (self.batches.iter()).fold(0usize, |n, b| n.saturating_add(b.num_rows()))
    }

    /// Every non-null `payload` cell, in file order, as production's reader takes them: the
    /// column is found by name in each batch and must be Utf8 with 32-bit offsets
    /// (LargeUtf8 and Utf8View are refused, as production refuses them).
    pub fn payloads(&self) -> Result<Vec<&str>, ShardError> {
        let mut out = Vec::new();
        for batch in &self.batches {
            let column = batch
                .column_by_name("payload")
                .ok_or(ShardError::NoPayloadColumn)?;
            let strings = column
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| ShardError::PayloadType(column.data_type().to_string()))?;
            out.extend(strings.iter().flatten());
        }
        Ok(out)
    }

    /// A column by name in each batch as text, for showing a shard: Int64 as decimals, Utf8
    /// as itself, nulls as `None`; `None` when a batch lacks it or holds another type.
    pub fn column_text(&self, name: &str) -> Option<Vec<Option<String>>> {
        let mut out = Vec::new();
        for batch in &self.batches {
            let column = batch.column_by_name(name)?;
            if let Some(ints) = column.as_any().downcast_ref::<Int64Array>() {
                out.extend(ints.iter().map(|v| v.map(|v| v.to_string())));
            } else if let Some(strings) = column.as_any().downcast_ref::<StringArray>() {
                out.extend(strings.iter().map(|v| v.map(str::to_owned)));
            } else if column.null_count() == column.len() {
                out.extend(std::iter::repeat_n(None, column.len()));
            } else {
                return None;
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::RecordBatchOptions;

    /// A stream whose one batch has no columns and declares `rows` rows: arrow accepts any
    /// count for a batch without buffers.
    fn declared_rows(rows: usize) -> Vec<u8> {
        let schema = Arc::new(Schema::empty());
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        let batch =
            RecordBatch::try_new_with_options(Arc::clone(&schema), vec![], &options).unwrap();
        let mut writer = StreamWriter::try_new(Vec::new(), &schema).unwrap();
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        writer.into_inner().unwrap()
    }

    #[test]
    fn a_row_count_the_bytes_do_not_hold_is_refused() {
        for rows in [1 << 20, 1 << 40, usize::MAX >> 1] {
            let bytes = declared_rows(rows);
            let refused = decode(&bytes).unwrap_err();
            assert!(
                matches!(refused, ShardError::Decode(ref why) if why.contains("rows")),
                "{refused}"
            );
        }
        // A few rows without a `payload` column decode, and are then refused for that.
        let small = decode(&declared_rows(3)).unwrap();
        assert_eq!(small.payloads().unwrap_err(), ShardError::NoPayloadColumn);
    }
}
