//! What both queues' AVX2 session paths share: their packets' first 16 bytes four at a time
//! ([`put_four`]) and the sum of four lanes' lengths ([`lengths_sum`]). The paths themselves are
//! each kind's (`rx::dv::avx2`, `rx::dv_striding::avx2`).

use std::arch::x86_64::*;

use crate::mem::pool::Packet;

/// Four packets' first 16 bytes ([`Packet::set_head`]) into `out`, with the buffers `bufs`: per
/// 64-bit lane of `x` the packet's length in the low half (the high half is dropped), `off_bits`
/// its offset bits above it ([`Packet::len_off`] `<< 32`), and `tail` its hash and flags
/// ([`Packet::hash_flags`]). Both queues' AVX2 session paths end with it.
#[target_feature(enable = "avx2")]
#[inline]
pub(in crate::rx) fn put_four(out: &mut [Packet; 4], bufs: &[u32; 4], x: __m256i, off_bits: __m256i, tail: __m256i) {
    #[allow(unsafe_code)]
    // SAFETY: `bufs` is four u32, 16 readable bytes; the load takes any alignment.
    let idx = _mm256_cvtepu32_epi64(unsafe { _mm_loadu_si128(bufs.as_ptr().cast()) });
    // Per lane `buf | len_off << 32`: a packet's first 8 bytes.
    let head = _mm256_or_si256(_mm256_or_si256(_mm256_slli_epi64::<32>(x), off_bits), idx);
    let (even, odd) = (_mm256_unpacklo_epi64(head, tail), _mm256_unpackhi_epi64(head, tail));
    let [p0, p1, p2, p3] = out;
    p0.set_head(_mm256_castsi256_si128(even));
    p1.set_head(_mm256_castsi256_si128(odd));
    p2.set_head(_mm256_extracti128_si256::<1>(even));
    p3.set_head(_mm256_extracti128_si256::<1>(odd));
}

/// The sum (mod 2^32) of the low 32-bit halves of `v`'s four 64-bit lanes: the lengths both
/// queues' AVX2 session paths add up, each lane's high half being something else.
#[target_feature(enable = "avx2")]
#[inline]
pub(in crate::rx) fn lengths_sum(v: __m256i) -> u32 {
    let l = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let l = _mm_add_epi32(l, _mm_unpackhi_epi64(l, l));
    _mm_cvtsi128_si32(l) as u32
}
