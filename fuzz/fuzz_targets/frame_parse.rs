//! Fuzzes the length-prefixed frame decoder on arbitrary bytes fed in arbitrary chunk sizes: it must
//! never panic, never reserve more than the frame cap, and yield the same frames however the bytes
//! are split.

#![no_main]

use bytes::BytesMut;
use kafka_mirror_proxy::protocol::FrameDecoder;
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

/// Frame cap for the fuzzer.
const MAX_FRAME: usize = 1 << 16;

fn frames(data: &[u8], chunk: usize) -> (Vec<Vec<u8>>, bool) {
    let mut decoder = FrameDecoder::new(MAX_FRAME);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in data.chunks(chunk.max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => out.push(frame.to_vec()),
                Ok(None) => break,
                Err(_) => return (out, false),
            }
            assert!(buf.capacity() <= MAX_FRAME + 4 + data.len(), "reserved past the cap");
        }
    }
    match decoder.decode_eof(&mut buf) {
        Ok(Some(frame)) => out.push(frame.to_vec()),
        Ok(None) => {}
        Err(_) => return (out, false),
    }
    (out, true)
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let whole = frames(rest, rest.len());
    let pieces = frames(rest, usize::from(split));
    assert_eq!(whole, pieces, "framing depends on how the bytes arrive");
});
