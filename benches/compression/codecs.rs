//! The codec candidates behind one trait: zstd (with and without a dictionary), LZ4
//! block and frame, Snappy.

use std::io::{Read, Write};

// ---------------------------------------------------------------------------------------
// Codecs

pub(crate) trait Codec {
    fn name(&self) -> String;
    /// Compresses `src` into `dst` (cleared first); the bytes a record would store,
    /// including whatever the codec needs to know the decompressed length.
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>);
    /// Decompresses `src` (made by `compress` of `n` bytes) into `dst`.
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>);
}

pub(crate) struct Zstd {
    pub(crate) label: String,
    pub(crate) c: zstd::bulk::Compressor<'static>,
    pub(crate) d: zstd::bulk::Decompressor<'static>,
}

impl Zstd {
    pub(crate) fn new(level: i32) -> Zstd {
        Zstd {
            label: format!("zstd {level}"),
            c: zstd::bulk::Compressor::new(level).unwrap(),
            d: zstd::bulk::Decompressor::new().unwrap(),
        }
    }
    pub(crate) fn with_dict(level: i32, dict: &[u8]) -> Zstd {
        Zstd {
            label: format!("zstd {level}+dict{}K", dict.len() / 1024),
            c: zstd::bulk::Compressor::with_dictionary(level, dict).unwrap(),
            d: zstd::bulk::Decompressor::with_dictionary(dict).unwrap(),
        }
    }
}

impl Codec for Zstd {
    fn name(&self) -> String {
        self.label.clone()
    }
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        dst.clear();
        dst.reserve(zstd::zstd_safe::compress_bound(src.len()));
        // The frame header holds the content size (bulk API default); no checksum (the
        // record's CRC covers the stored bytes).
        self.c.compress_to_buffer(src, dst).unwrap();
    }
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>) {
        dst.clear();
        dst.reserve(n);
        self.d.decompress_to_buffer(src, dst).unwrap();
    }
}

/// Bytes of a LEB128 varint of `n`: what a record would spend on the decompressed length
/// for a codec whose output does not carry it.
fn varint_len(n: usize) -> usize {
    let bits = usize::BITS - n.max(1).leading_zeros();
    bits.div_ceil(7) as usize
}

pub(crate) struct Lz4Block;

impl Codec for Lz4Block {
    fn name(&self) -> String {
        "lz4_flex block".into()
    }
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        let k = varint_len(src.len());
        dst.clear();
        dst.resize(k + lz4_flex::block::get_maximum_output_size(src.len()), 0);
        let n = lz4_flex::block::compress_into(src, &mut dst[k..]).unwrap();
        dst.truncate(k + n);
    }
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>) {
        let k = varint_len(n);
        dst.clear();
        dst.resize(n, 0);
        let got = lz4_flex::block::decompress_into(&src[k..], dst).unwrap();
        assert_eq!(got, n);
    }
}

pub(crate) struct Lz4Frame;

impl Codec for Lz4Frame {
    fn name(&self) -> String {
        "lz4_flex frame".into()
    }
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        dst.clear();
        let mut enc = lz4_flex::frame::FrameEncoder::new(std::mem::take(dst));
        enc.write_all(src).unwrap();
        *dst = enc.finish().unwrap();
    }
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>) {
        dst.clear();
        dst.reserve(n);
        lz4_flex::frame::FrameDecoder::new(src)
            .read_to_end(dst)
            .unwrap();
    }
}

pub(crate) struct Snap {
    pub(crate) e: snap::raw::Encoder,
    pub(crate) d: snap::raw::Decoder,
}

impl Codec for Snap {
    fn name(&self) -> String {
        "snap raw".into()
    }
    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) {
        dst.clear();
        dst.resize(snap::raw::max_compress_len(src.len()), 0);
        let n = self.e.compress(src, dst).unwrap();
        dst.truncate(n);
    }
    fn decompress(&mut self, src: &[u8], n: usize, dst: &mut Vec<u8>) {
        dst.clear();
        dst.resize(n, 0);
        let got = self.d.decompress(src, dst).unwrap();
        assert_eq!(got, n);
    }
}

pub(crate) fn codecs(dict: Option<&[u8]>) -> Vec<Box<dyn Codec>> {
    let mut v: Vec<Box<dyn Codec>> = vec![
        Box::new(Zstd::new(-1)),
        Box::new(Zstd::new(1)),
        Box::new(Zstd::new(3)),
        Box::new(Zstd::new(6)),
    ];
    if let Some(d) = dict {
        v.push(Box::new(Zstd::with_dict(1, d)));
        v.push(Box::new(Zstd::with_dict(3, d)));
    }
    v.push(Box::new(Lz4Block));
    v.push(Box::new(Lz4Frame));
    v.push(Box::new(Snap {
        e: snap::raw::Encoder::new(),
        d: snap::raw::Decoder::new(),
    }));
    v
}
