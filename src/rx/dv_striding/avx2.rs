//! The striding queue's AVX2 code: its refill's data segments, four a step ([`fill_wqes_avx2`]),
//! and compressed sessions of whole striding WQEs ([`RxCore::wqe_sessions`]), the
//! common case of a
//! striding+compressed queue (the device fills a WQE's strides one frame each and reports them
//! in one session of as many mini-CQEs; with stride-index mini-CQEs a session never spans WQEs).
//! Four mini-CQEs are one 32-byte load; a byte shuffle puts each one's byte count and stride
//! index in host order side by side, one subtract turns them into the frame's length and its
//! distance from the stride it must be at, and one unsigned min and compare check both for the
//! four at once, where the scalar path ([`super::take_session`]) checks each mini-CQE with
//! several scalar instructions. Each packet's first 16 bytes (buffer, length and offset, the
//! title's hash and flags) are then one store. DPDK's `rxq_cq_decompress_v`
//! (`mlx5_rxtx_vec_sse.h`) expands mini-CQEs with the same shuffles, four to a step.
//! Sessions of any other shape, WQEs of other than 8 or 16 strides, and CPUs without AVX2 or
//! without MOVBE take the scalar path.

use std::arch::x86_64::*;

use super::Striding;
use crate::dv::prm::{mprq, DataSeg, MiniCqe};
use crate::dv::ring::{Session, StridingRqRing};
use crate::mem::pool::{BufGeometry, Packet};
use crate::rx::dv_core::avx2::{lengths_sum, put_four};
use crate::rx::dv_core::{Progress, RxCore, FLAGS_LUT};

// The byte order the shuffle assumes: a mini-CQE is the big-endian checksum, stride index and
// byte count, 2, 2 and 4 bytes.
const _: () = assert!(
    std::mem::size_of::<MiniCqe>() == 8
        && std::mem::offset_of!(MiniCqe, w0) == 0
        && std::mem::offset_of!(MiniCqe, byte_cnt) == 4
);

/// The queue's constants for [`expand_wqe`], built once a burst.
#[derive(Clone, Copy)]
pub(super) struct Consts {
    /// Per 8-byte lane: bytes 7..4 (the byte count) then 3, 2 (the stride index) of the lane's
    /// mini-CQE, zero-extended: `byte_cnt | stride_idx << 32` in host order.
    order: __m256i,
    /// Per lane: the largest length a one-stride frame has, and 0 for the index's distance.
    limit: __m256i,
    /// Per lane: the offset half of [`Packet::len_off`], above the buffer index.
    off_bits: __m256i,
}

impl Consts {
    #[target_feature(enable = "avx2")]
    pub(super) fn new(stride: u32, data_off: u16) -> Consts {
        #[rustfmt::skip]
        let order = _mm256_setr_epi8(
            7, 6, 5, 4, 3, 2, -128, -128, 15, 14, 13, 12, 11, 10, -128, -128,
            7, 6, 5, 4, 3, 2, -128, -128, 15, 14, 13, 12, 11, 10, -128, -128,
        );
        Consts {
            order,
            limit: _mm256_set1_epi64x(i64::from(stride)),
            off_bits: _mm256_set1_epi64x((u64::from(Packet::len_off(0, data_off)) << 32) as i64),
        }
    }
}

/// Per lane of group `g` (mini-CQEs `4g ..= 4g + 3` of a session at the start of its WQE): the
/// stride bit of a one-stride frame's MPRQ byte count, and the stride index the mini-CQE must
/// name, to subtract.
#[target_feature(enable = "avx2")]
#[inline]
fn expected(g: usize) -> __m256i {
    let one = 1i64 << mprq::STRIDE_NUM_SHIFT;
    let at = |i: usize| one | ((4 * g + i) as i64) << 32;
    _mm256_setr_epi64x(at(0), at(1), at(2), at(3))
}

/// Hands up the `N` frames of `sess`, a compressed session of `N` stride-index mini-CQEs that
/// begins its WQE of `N` strides (whose buffers are `bufs`) into `out`, when each is a
/// one-stride frame at the stride of its place (the test of [`super::at_strides`] and
/// [`super::one_stride_frames`]): adds their bytes to `sum`'s lanes and returns true. Else
/// false, `sum` untouched (what it wrote in `out` is not committed: the caller's scalar path
/// takes the session again).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn expand_wqe<const N: usize>(
    sess: &Session<'_>,
    out: &mut [Packet; N],
    bufs: &[u32; N],
    k: Consts,
    hf: __m256i,
    sum: &mut __m256i,
) -> bool {
    const { assert!(N.is_multiple_of(8)) };
    let mut ok = _mm256_set1_epi32(-1);
    let mut bytes = _mm256_setzero_si256();
    for g in 0..N / 4 {
        let minis = &sess.array((g / 2) as u32)[(g % 2) * 4..][..4];
        #[allow(unsafe_code)]
        // SAFETY: `minis` is four 8-byte mini-CQEs, 32 readable bytes; the load takes any
        // alignment.
        let raw = unsafe { _mm256_loadu_si256(minis.as_ptr().cast()) };
        // Per lane: the length (the byte count less its one stride), and the stride index less
        // the one expected: 0 when right.
        let x = _mm256_sub_epi32(_mm256_shuffle_epi8(raw, k.order), expected(g));
        ok = _mm256_and_si256(ok, _mm256_cmpeq_epi32(_mm256_min_epu32(x, k.limit), x));
        bytes = _mm256_add_epi32(bytes, x);
        put_four(
            (&mut out[4 * g..][..4]).try_into().expect("4"),
            bufs[4 * g..][..4].try_into().expect("4"),
            x,
            k.off_bits,
            hf,
        );
    }
    if _mm256_movemask_epi8(ok) != -1 {
        return false;
    }
    *sum = _mm256_add_epi32(*sum, bytes);
    true
}

impl RxCore<Striding> {
    /// Takes every compressed session from the consumer index on that is a whole WQE of `N`
    /// strides ([`expand_wqe`]) and fits `slots`, as [`Self::sessions`] does, with its state in
    /// locals. Stops at anything else (the CQE there untouched, for the scalar path), at an
    /// empty slot, or when the burst is full. The caller moves the consumer indices. It runs
    /// first in a burst, and takes nothing unless `rq_ci` is at a WQE's start: once the
    /// scalar path has taken part of a WQE (a burst whose room is not a multiple of `N`, a
    /// session split by the device), the rest of that burst is scalar, and the next burst whose
    /// first session starts a WQE is vector again.
    #[target_feature(enable = "avx2,movbe")]
    #[inline]
    pub(super) fn wqe_sessions<const N: usize>(&mut self, slots: &mut [Packet]) -> Progress {
        let (ci0, st0) = (self.cq_ci, self.rq_ci);
        let mut t = Progress::at(ci0, st0);
        if !(st0 as usize).is_multiple_of(N) {
            return t;
        }
        let cq = self.cq.reader();
        let k = Consts::new(self.room, self.data_off);
        let room = slots.len().min(self.posted() as usize);
        let smask = self.bufs.len() - 1;
        let (mut n, mut sum, mut drops) = (0usize, _mm256_setzero_si256(), 0u64);
        while n + N <= room {
            let ci = ci0.wrapping_add(n as u32);
            let title = match cq.poll_title(ci) {
                Ok(title) => title,
                Err(empty) => {
                    t.empty = empty;
                    break;
                }
            };
            if title.mini_cqe_count() != N as u32 {
                break;
            }
            let Some(sess) = cq.session(ci, N as u32) else { break };
            let flags = FLAGS_LUT[(title.hdr_type_vlan() >> 16) as usize & 0x7ff];
            let hf = _mm256_set1_epi64x(Packet::hash_flags(title.rx_hash_res.get(), flags) as i64);
            // A WQE's strides start at a multiple of N in `bufs`, whose length is one too.
            let s = st0.wrapping_add(n as u32) as usize & smask;
            let out: &mut [Packet; N] = (&mut slots[n..n + N]).try_into().expect("N");
            let bufs: &[u32; N] = self.bufs[s..s + N].try_into().expect("N");
            if !expand_wqe::<N>(&sess, out, bufs, k, hf, &mut sum) {
                break;
            }
            sess.invalidate();
            drops += u64::from(title.rx_drops()) * N as u64;
            n += N;
        }
        #[cfg(test)]
        {
            self.rq.vector_sessions += (n / N) as u64;
        }
        t.n = n;
        t.ci = ci0.wrapping_add(n as u32);
        t.rq_ci = st0.wrapping_add(n as u32);
        t.bytes = u64::from(lengths_sum(sum));
        t.drops = drops;
        t
    }
}

/// What [`fill_wqes_avx2`] writes besides the addresses: a buffer's address is `base + idx *
/// size` ([`BufGeometry::buf_addr`] with the data offset in `base`), and every data segment of
/// the queue starts with the same byte count and lkey (`head`, the first 8 bytes as they lie,
/// written by [`DvStridingRxQueue::new`](super::DvStridingRxQueue::new) and never changed).
#[derive(Clone, Copy)]
pub(super) struct Wide {
    base: u64,
    size: u32,
    head: u64,
}

impl Wide {
    /// For buffers of `geo` at data offset `off`, segments like `seg`; None where a buffer's
    /// size does not fit the 32-bit multiply (the scalar loop then writes every address).
    pub(super) fn new(geo: BufGeometry<'_>, off: u32, seg: DataSeg) -> Option<Wide> {
        let base = geo.buf_addr(0, off);
        let size = u32::try_from(geo.buf_addr(1, off) - base).ok()?;
        // The two big-endian words' bytes in memory order, read as one little-endian word.
        let head = u64::from(seg.byte_count.get().to_be()) | u64::from(seg.lkey.get().to_be()) << 32;
        Some(Wide { base, size, head })
    }
}

const _: () = assert!(std::mem::size_of::<DataSeg>() == 16 && std::mem::align_of::<DataSeg>() <= 16);

/// The refill's data segments with AVX2, whole, in the `wqes` WQEs from `pi0` on (their
/// buffers in `bufs`, indexed by the free-running stride counter as
/// [`RxCore::refill`] keeps them; a WQE's strides a multiple of four), by
/// [`segs_avx2`]; a WQE of 16 strides in straight-line code. Compiled for AVX2, which the
/// caller must have checked.
#[target_feature(enable = "avx2")]
pub(super) fn fill_wqes_avx2(rq: &mut StridingRqRing, bufs: &[u32], pi0: u32, wqes: u32, log_n: u32, w: Wide) {
    let n = 1usize << log_n;
    let smask = bufs.len() - 1;
    for k in 0..wqes {
        let pi = pi0.wrapping_add(k);
        let at = (pi << log_n) as usize & smask;
        let (segs, b) = (rq.segs(pi), &bufs[at..at + n]);
        if n == 16 {
            segs_avx2(&mut segs[..16], &b[..16], w);
        } else {
            segs_avx2(segs, b, w);
        }
    }
}

/// The data segments `segs` for the buffers `bufs`, four at a time (the rest, past a multiple
/// of four, left alone): for four buffer indices, a widening load, a multiply, an add and a byte
/// swap give their four big-endian addresses, a permute and two unpacks put them beside the
/// constant byte count and lkey as four 16-byte segments, and two 32-byte stores write them
/// (nine instructions where the scalar [`super::fill_wqe`] takes sixteen: a load, multiply, add and
/// `movbe` store per address). Compiled for AVX2, which the caller must have checked.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn segs_avx2(segs: &mut [DataSeg], bufs: &[u32], w: Wide) {
    // `size` < 2^32 in each lane: the 32x32-bit multiply of an index by it is exact.
    let (size, base) = (_mm256_set1_epi64x(i64::from(w.size)), _mm256_set1_epi64x(w.base as i64));
    let head = _mm256_set1_epi64x(w.head as i64);
    // Reverses the bytes of each 64-bit lane (the shuffle works within each 128-bit half).
    let swap = _mm256_setr_epi8(
        7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8,
    );
    for (s, b) in segs.chunks_exact_mut(4).zip(bufs.chunks_exact(4)) {
        #[allow(unsafe_code)]
        // SAFETY: `b` is four u32, 16 readable bytes; the load takes any alignment.
        let idx = unsafe { _mm_loadu_si128(b.as_ptr().cast()) };
        let be = _mm256_shuffle_epi8(
            _mm256_add_epi64(_mm256_mul_epu32(_mm256_cvtepu32_epi64(idx), size), base),
            swap,
        );
        // Addresses 0, 2 | 1, 3: each 128-bit half's low words are then segments 0 and 1, its
        // high words 2 and 3.
        let a = _mm256_permute4x64_epi64::<0b11_01_10_00>(be);
        let (s01, s23) = (_mm256_unpacklo_epi64(head, a), _mm256_unpackhi_epi64(head, a));
        #[allow(unsafe_code)]
        // SAFETY: `s` is four 16-byte `DataSeg`s (asserted above), 64 writable bytes, which the
        // two unaligned 32-byte stores fill; any bit pattern is a valid `DataSeg`.
        unsafe {
            _mm256_storeu_si256(s.as_mut_ptr().cast(), s01);
            _mm256_storeu_si256(s.as_mut_ptr().add(2).cast(), s23);
        }
    }
}
