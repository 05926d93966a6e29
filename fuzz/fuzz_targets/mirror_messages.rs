//! Decodes arbitrary bytes as every mirror request and response body and as a request header; none
//! may panic, and whatever decodes must re-encode to bytes that decode to the same value.
#![no_main]

use kafka_mirror_proxy::protocol::mirror::{
    self, AddTopicsToMirrorRequest, AlterMirrorConfigsRequest, CreateMirrorRequest, DescribeMirrorConfigsResponse, DescribeMirrorsRequest,
    DescribeMirrorsResponse, ListMirrorsResponse, MirrorApiKey, TopicsResponse,
};
use libfuzzer_sys::fuzz_target;

fn check<T: mirror::wire::Field + PartialEq + std::fmt::Debug>(api: MirrorApiKey, data: &[u8]) {
    if let Ok(value) = mirror::decode_body::<T>(api, 0, data) {
        let bytes = mirror::encode_body(api, 0, &value).expect("version 0 encodes");
        assert_eq!(mirror::decode_body::<T>(api, 0, &bytes).ok(), Some(value));
    }
}

fuzz_target!(|data: &[u8]| {
    check::<CreateMirrorRequest>(MirrorApiKey::CreateMirror, data);
    check::<AddTopicsToMirrorRequest>(MirrorApiKey::AddTopicsToMirror, data);
    check::<AlterMirrorConfigsRequest>(MirrorApiKey::AlterMirrorConfigs, data);
    check::<DescribeMirrorsRequest>(MirrorApiKey::DescribeMirrors, data);
    check::<DescribeMirrorsResponse>(MirrorApiKey::DescribeMirrors, data);
    check::<ListMirrorsResponse>(MirrorApiKey::ListMirrors, data);
    check::<TopicsResponse>(MirrorApiKey::AddTopicsToMirror, data);
    check::<DescribeMirrorConfigsResponse>(MirrorApiKey::DescribeMirrorConfigs, data);
    let _ = mirror::decode_request_header(&bytes::Bytes::copy_from_slice(data));
});
