//! What both Direct Verbs receive queues (the cyclic `rx::dv`, the striding `rx::dv_striding`)
//! read completions with: the compressed session in progress ([`Zip`]), the packet flags of
//! every CQE flags word ([`FLAGS_LUT`]), the mini-CQEs of an array slot ([`MINI`]); and, for
//! their AVX2 session paths, the packet stores they share (`avx2`).

use crate::dv::prm::{cqe_flags, mini_array_slot, Cqe64, MiniArray};
use crate::dv::ring::CqRing;
use crate::mem::pool::flags;

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2;

/// A compressed session (reference §3.11): title at CQ index `head`, `n` packets of which `done`
/// are handed up. Flags and drop count come from the title, common to every packet (Linux
/// `mlx5e_decompress_cqe`, DPDK `rxq_cq_decompress_v`); per packet, a mini-CQE gives the byte
/// count and RSS hash (hash format) or stride index (the striding queue's format, whose
/// packets all take the title's `hash`). The array being read is copied, as VPP keeps
/// `n_mini_cqes_left` and its state across polls: its slot may be rewritten once the consumer
/// index is published past it.
#[derive(Default)]
pub(crate) struct Zip {
    pub(crate) head: u32,
    pub(crate) n: u32,
    pub(crate) done: u32,
    pub(crate) flags: u32,
    pub(crate) drops: u8,
    pub(crate) hash: u32,
    pub(crate) minis: MiniArray,
}

impl Zip {
    /// The session titled by `title` at CQ index `ci`, its first mini-CQE array read (at `ci + 1`).
    #[inline(always)]
    pub(crate) fn open(title: &Cqe64, ci: u32, cq: &CqRing) -> Zip {
        Zip {
            head: ci,
            n: title.mini_cqe_count(),
            done: 0,
            flags: FLAGS_LUT[(title.hdr_type_vlan() >> 16) as usize & 0x7ff],
            drops: title.rx_drops(),
            hash: title.rx_hash_res.get(),
            minis: cq.reader().mini_array(ci.wrapping_add(mini_array_slot(0))),
        }
    }

    /// Drops every completion `cq` holds from consumer index `ci` on (a WQ reset made them stale):
    /// the rest of this session, then each CQE, a session (on a compressing CQ, `zip_on`) as
    /// many as its packets, their slots invalidated. Returns the new consumer index and the
    /// packets dropped; the session is closed.
    pub(crate) fn drain(&mut self, cq: &CqRing, ci: u32, zip_on: bool) -> (u32, u64) {
        let r = cq.reader();
        let left = self.n - self.done;
        for k in self.done.max(1)..self.n {
            r.invalidate(self.head.wrapping_add(k));
        }
        let mut ci = ci.wrapping_add(left);
        let mut dropped = u64::from(left);
        *self = Zip::default();
        while cq.ready(ci) {
            let n = match cq.poll(ci) {
                Some(c) if zip_on && c.is_title() => c.mini_cqe_count().clamp(1, cq.size()),
                _ => 1,
            };
            for k in 1..n {
                r.invalidate(ci.wrapping_add(k));
            }
            ci = ci.wrapping_add(n);
            dropped += u64::from(n);
        }
        (ci, dropped)
    }

    /// The mini-CQE array holding packet `k` of the session, read when `k` starts one (the first
    /// was read by [`Zip::open`]).
    #[inline(always)]
    pub(crate) fn next_array(&mut self, k: u32, cq: &CqRing) {
        if k.is_multiple_of(MINI) && k != 0 {
            self.minis = cq
                .reader()
                .mini_array(self.head.wrapping_add(mini_array_slot(k / MINI)));
        }
    }
}

/// Mini-CQEs per array slot.
pub(crate) const MINI: u32 = crate::dv::prm::MINI_CQES_PER_SLOT;

/// Packet flags for every value of the low 11 bits of the CQE flags word `hdr_type_etc` (the
/// BE16 at 0x1c: rdma-core's `mlx5_cqe64.hds_ip_ext` is its high byte, with L2/L3/L4 ok in bits
/// 8..=10, and `l4_hdr_type_etc` its low byte: IP fragment bit 7, L4 type 6:4, L3 type 3:2, IP
/// options bit 1, VLAN stripped bit 0), computed once at compile time so the receive loop pays
/// one load instead of a dozen tests. IPv4 checksum-ok needs an IPv4 L3 type (rdma-core
/// `get_csum_ok`); L4 ok needs a TCP/UDP type.
/// Indexed by `hdr_type_etc & 0x7ff`. Bit 0 is not a packet property, so every entry ignores it
/// (`i & 0x7fe` below) rather than the loop shifting it out: one instruction less per packet.
pub(super) static FLAGS_LUT: [u32; 2048] = {
    let mut t = [0u32; 2048];
    let mut i = 0;
    while i < 2048 {
        t[i] = packet_flags(i as u16 & 0x7fe);
        i += 1;
    }
    t
};

const fn packet_flags(f: u16) -> u32 {
    let l3 = (f & cqe_flags::L3_TYPE_MASK) >> cqe_flags::L3_TYPE_SHIFT;
    let l4 = (f & cqe_flags::L4_TYPE_MASK) >> cqe_flags::L4_TYPE_SHIFT;
    let mut out = flags::RSS_HASH;
    if l3 == cqe_flags::L3_IPV4 {
        out |= flags::IPV4;
        if f & cqe_flags::L3_OK != 0 {
            out |= flags::L3_CSUM_OK;
        }
    } else if l3 == cqe_flags::L3_IPV6 {
        out |= flags::IPV6;
    }
    if l4 == cqe_flags::L4_UDP {
        out |= flags::UDP;
    } else if l4 != cqe_flags::L4_NONE {
        out |= flags::TCP;
    }
    if l4 != cqe_flags::L4_NONE && f & cqe_flags::L4_OK != 0 {
        out |= flags::L4_CSUM_OK;
    }
    if f & cqe_flags::IP_FRAG != 0 {
        out |= flags::IP_FRAG;
    }
    if f & cqe_flags::IP_EXT_OPTS != 0 {
        out |= flags::IP_OPTIONS;
    }
    out
}
