//! The cyclic queue's AVX2 code: its refill's WQE addresses ([`post_addrs_avx2`]), and its
//! compressed sessions' full arrays of eight hash-format mini-CQEs expanded four a step
//! ([`zip_chunk`]), as DPDK's `rxq_cq_decompress_v` (`mlx5_rxtx_vec_sse.h`) does. A 32-byte
//! load takes four mini-CQEs, a byte shuffle turns each one's big-endian hash and byte count
//! into `byte_cnt | hash << 32` in host order, one unsigned min and compare checks the four
//! lengths against the buffers' data room, and each packet's first 16 bytes (buffer, length and
//! offset, hash, the title's flags) are one store ([`put_four`], shared with the striding
//! queue's AVX2 path in `rx::dv_core::avx2`). The scalar [`super::zip_chunk`] takes a `movbe`
//! load and three stores per packet. Partial arrays, sessions carried across bursts (the
//! cyclic `RxCore::expand`), and CPUs
//! without AVX2 or without MOVBE take the scalar path.

use std::arch::x86_64::*;

use super::{mark_long, ZipChunk, MINI};
use crate::dv::prm::{Be64, DataSeg, MiniCqe};
use crate::dv::ring::ZipArray;
use crate::mem::pool::{Packet, Pool};
use crate::rx::dv_core::avx2::{lengths_sum, put_four};
use crate::QueueStats;

// The byte order the shuffle assumes: a hash-format mini-CQE is the big-endian RSS hash, then
// the big-endian byte count.
const _: () = assert!(
    std::mem::size_of::<MiniCqe>() == 8
        && std::mem::offset_of!(MiniCqe, w0) == 0
        && std::mem::offset_of!(MiniCqe, byte_cnt) == 4
        && MINI == 8
);

/// [`super::zip_chunk`] with AVX2: the eight packets of mini-CQE array `a` into `out` (buffers
/// `bufs`), their bytes added to `sum`, a length past `z.room` marked by [`mark_long`] (counted
/// in `stats` as a bad CQE), then the array's slots invalidated.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn zip_chunk<const FIRST: usize>(
    z: &ZipChunk,
    a: ZipArray<'_, FIRST>,
    out: &mut [Packet],
    bufs: &[u32],
    sum: &mut u64,
    pool: &Pool,
    stats: &mut QueueStats,
) {
    let minis = a.minis();
    let (out, bufs): (&mut [Packet; 8], &[u32; 8]) = (out.try_into().expect("8"), bufs.try_into().expect("8"));
    // Per 8-byte lane: bytes 7..4 (the byte count) then 3..0 (the hash) of the lane's mini-CQE.
    #[rustfmt::skip]
    let order = _mm256_setr_epi8(
        7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8,
        7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8,
    );
    // Per lane: the longest length a buffer holds; any hash.
    let limit = _mm256_set1_epi64x((u64::from(z.room) | 0xffff_ffff << 32) as i64);
    let off_bits = _mm256_set1_epi64x((u64::from(z.lo) << 32) as i64);
    let flags = _mm256_set1_epi64x((u64::from(z.flags) << 32) as i64);
    let (mut ok, mut lens) = (_mm256_set1_epi32(-1), _mm256_setzero_si256());
    for g in 0..2 {
        let four = &minis[4 * g..][..4];
        #[allow(unsafe_code)]
        // SAFETY: `four` is four 8-byte mini-CQEs, 32 readable bytes; the load takes any
        // alignment.
        let raw = unsafe { _mm256_loadu_si256(four.as_ptr().cast()) };
        // Per lane `byte_cnt | hash << 32`, as `MiniCqe::hash_len`.
        let x = _mm256_shuffle_epi8(raw, order);
        ok = _mm256_and_si256(ok, _mm256_cmpeq_epi32(_mm256_min_epu32(x, limit), x));
        lens = _mm256_add_epi32(lens, x);
        // Per lane a packet's next 8 bytes, `hash | flags << 32`.
        let tail = _mm256_or_si256(_mm256_srli_epi64::<32>(x), flags);
        put_four(
            (&mut out[4 * g..][..4]).try_into().expect("4"),
            bufs[4 * g..][..4].try_into().expect("4"),
            x,
            off_bits,
            tail,
        );
    }
    *sum = sum.wrapping_add(u64::from(lengths_sum(lens)));
    if _mm256_movemask_epi8(ok) != -1 {
        mark_long(z, out, minis, sum, pool, stats);
    }
    a.invalidate();
}

/// The refill's address stores with AVX2, four WQEs per vector and eight per loop step: each
/// buffer index of `bufs` becomes the big-endian address `base + idx * size`
/// ([`BufGeometry::buf_addr`](crate::mem::pool::BufGeometry::buf_addr), `base` with the data
/// offset in it) in the WQE of `segs` beside it. Per four WQEs: a widening load of the indices,
/// a multiply, an add, a byte swap and four 8-byte stores, where the scalar loop takes a load, a
/// multiply, an add and a `movbe` store each (fewer instructions per packet on the compressed
/// path, measured with `scripts/callgrind.sh`). Returns how many it wrote (a multiple of eight);
/// the caller writes the rest. Compiled for AVX2, which the caller must have checked.
#[target_feature(enable = "avx2")]
pub(super) fn post_addrs_avx2(segs: &mut [DataSeg], bufs: &[u32], base: u64, size: u32) -> usize {
    let n = segs.len().min(bufs.len()) / 8 * 8;
    // `size` < 2^32 in each lane: the 32x32-bit multiply of an index by it is exact.
    let (size, base) = (_mm256_set1_epi64x(i64::from(size)), _mm256_set1_epi64x(base as i64));
    // Reverses the bytes of each 64-bit lane (the shuffle works within each 128-bit half).
    let swap = _mm256_setr_epi8(
        7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8,
    );
    // Four WQEs from four indices: their addresses, big-endian, as two halves of two each.
    let four = |idx: __m128i| {
        let be = _mm256_shuffle_epi8(
            _mm256_add_epi64(_mm256_mul_epu32(_mm256_cvtepu32_epi64(idx), size), base),
            swap,
        );
        (_mm256_castsi256_si128(be), _mm256_extracti128_si256::<1>(be))
    };
    let put = |s: &mut [DataSeg], (lo, hi): (__m128i, __m128i)| {
        s[0].addr = Be64::from_bits(_mm_cvtsi128_si64(lo) as u64);
        s[1].addr = Be64::from_bits(_mm_extract_epi64::<1>(lo) as u64);
        s[2].addr = Be64::from_bits(_mm_cvtsi128_si64(hi) as u64);
        s[3].addr = Be64::from_bits(_mm_extract_epi64::<1>(hi) as u64);
    };
    for (s, b) in segs[..n].chunks_exact_mut(8).zip(bufs[..n].chunks_exact(8)) {
        #[allow(unsafe_code)]
        // SAFETY: `b` is eight u32, 32 readable bytes; the loads take any alignment.
        let (i0, i1) = unsafe {
            (
                _mm_loadu_si128(b.as_ptr().cast()),
                _mm_loadu_si128(b.as_ptr().add(4).cast()),
            )
        };
        let (s0, s1) = s.split_at_mut(4);
        put(s0, four(i0));
        put(s1, four(i1));
    }
    n
}
