//! The API server's protobuf: objects, list pages and watch streams of
//! the three kinds, as any bytes the connection could carry.

use k8s_openapi::api::{
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};

use crate::{
    model::{node_info, ServiceRecord, SliceRecord},
    source::protobuf::{self, Frames},
};

use super::objects::NODE;

/// What a decoded object is turned into downstream: its conversion must
/// hold whatever the decoder let through.
trait Converts {
    fn convert(&self);
}

impl Converts for Service {
    fn convert(&self) {
        let _ = ServiceRecord::convert(self);
    }
}

impl Converts for EndpointSlice {
    fn convert(&self) {
        let _ = SliceRecord::convert(self, NODE);
    }
}

impl Converts for Node {
    fn convert(&self) {
        let _ = node_info(self);
    }
}

fn every_kind(data: &[u8]) {
    fn one<K>(data: &[u8])
    where
        K: protobuf::FromProtobuf + kube::Resource + Converts,
    {
        if let Ok(object) = protobuf::object::<K>(data) {
            object.convert();
        }
        if let Ok(page) = protobuf::list::<K>(data) {
            page.items.iter().for_each(Converts::convert);
        }
        if let Ok(protobuf::WatchEvent::Added(object)) =
            protobuf::watch_event::<K>(data)
        {
            object.convert();
        }
    }
    one::<Service>(data);
    one::<EndpointSlice>(data);
    one::<Node>(data);
    let _ = protobuf::status(data);
}

/// The frames of `chunks` pushed in turn, and where the stream broke.
fn frames(chunks: &[&[u8]]) -> (Vec<Vec<u8>>, bool) {
    let mut frames = Frames::default();
    let mut out = Vec::new();
    for chunk in chunks {
        frames.push(chunk);
        loop {
            match frames.next_frame() {
                Ok(Some(frame)) => out.push(frame.to_vec()),
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

/// The first byte picks where the stream is cut; the rest is the stream.
/// However it arrives, a stream gives the same frames, and each decodes
/// (or not) without a panic.
pub(super) fn api_protobuf(data: &[u8]) {
    every_kind(data);
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).min(stream.len());
    let (whole, broke_whole) = frames(&[stream]);
    let (cut_up, broke_cut) = frames(&[&stream[..cut], &stream[cut..]]);
    if !broke_whole && !broke_cut {
        assert_eq!(whole, cut_up, "frames depend on how the bytes arrive");
    }
    for frame in &whole {
        every_kind(frame);
    }
}
