//! Fuzzes the record-batch readers on arbitrary bytes: batch framing, header accessors, CRC check,
//! record iteration (with decompression), control markers and header patching. Any panic, hang or
//! unbounded allocation is a bug; every malformed input must come back as a `BatchError`.

#![no_main]

use bytes::Bytes;
use kafka_mirror_proxy::protocol::batch::{RawBatch, RecordBatches};
use libfuzzer_sys::fuzz_target;

/// Decompression cap for the fuzzer, in bytes: well below libFuzzer's default RSS limit.
const MAX_UNCOMPRESSED_BYTES: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let data = Bytes::copy_from_slice(data);
    let mut batches = RecordBatches::new(data.clone());
    for batch in batches.by_ref() {
        let Ok(batch) = batch else { break };
        let _ = batch.verify_crc();
        let _ = (batch.next_offset(), batch.compression(), batch.timestamp_type(), batch.is_transactional(), batch.is_control(), batch.has_delete_horizon());
        if let Ok(records) = batch.records_with_limit(MAX_UNCOMPRESSED_BYTES) {
            for record in records {
                let Ok(record) = record else { break };
                let _ = (batch.record_offset(&record), batch.record_timestamp(&record));
            }
        }
        let _ = batch.control_marker();

        // Patching any framed batch must give a batch that frames again with a valid CRC.
        let mut patch = batch.to_mut();
        patch.set_base_offset(0).set_producer_id(1 << 62).set_base_sequence(0);
        let patched = RawBatch::from_bytes(patch.finish()).expect("patched batch frames");
        patched.verify_crc().expect("patched batch has a valid CRC");
        assert_eq!(patched.records_section(), batch.records_section());
    }
    let _ = batches.remaining_partial();
    let _ = RawBatch::from_bytes(data);
});
