//! The AF_XDP send path: the caller's buffers are posted on the TX ring by their offset in the
//! pool's region (no copy), one release store of the producer per burst, a `sendto` only when
//! the TX ring's `need_wakeup` flag asks (always, in copy mode), and buffers come back to the
//! pool in bulk from the completion ring. Counters: `packets`/`bytes` for frames handed to the
//! kernel, `drops` for frames refused here (shorter than an Ethernet header or running past
//! their buffer, never handed over) and for frames the device then dropped on a full queue
//! (EBUSY: these are in `packets` too, since the kernel completes them without saying which or
//! how long they were), `errors.other` for wake-ups the kernel failed with a real error.
//!
//! **Checksums.** A packet flagged [`flags::TX_L4_CSUM`] (pktgen's IPv6 frames) or
//! [`flags::TX_L3_CSUM`] gets its TCP/UDP or IPv4 header checksum computed here, in software,
//! before it is posted. The DV and verbs paths hand these requests to the NIC (the send WQE's
//! `cs_flags`, `IBV_SEND_IP_CSUM`); AF_XDP has no such offload in copy mode, and in zero-copy mode
//! only through TX metadata (Linux 6.8+, and a driver that implements it). Sending the frame as it
//! is would put a UDP checksum of 0 on the wire, which over IPv6 means an invalid datagram
//! (RFC 8200 §8.1) that receivers drop. Frames without the flags cost one test of the flags.

use std::rc::Rc;

use crate::flow::wire;
use crate::mem::pool::{flags, Burst, Packet, Pool};
use crate::sys::xsk;
use crate::xsk::socket::{Socket, TxRings};
use crate::{same_pool, Error, QueueError, QueueStats, TxQueue};

/// After the kernel reports the device's queue full (`EBUSY`), completions to wait for before
/// the next wake-up. With the interface's default `noqueue` qdisc a full device queue (veth's
/// 256-entry ptr_ring, a NIC's TX ring) makes `__xsk_generic_xmit` drop the frame and answer
/// EBUSY; kicking again at once only drops the next one, and every such attempt builds and frees
/// an skb and takes the completion-ring lock the consumer's CPU needs for its own completions.
/// Completions are the consumer draining that queue, so waiting for about a quarter of veth's
/// ring (the dropped frame's own completion counts as one) restarts the sender while the queue is
/// still three quarters full: the consumer never idles.
const BUSY_BACKOFF: u32 = 64;

/// The transmit requests this queue carries out itself (see the module documentation).
const CSUM: u32 = flags::TX_L3_CSUM | flags::TX_L4_CSUM;

/// How long dropping a queue waits for the frames it still holds to go out.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

pub(crate) struct XdpTxQueue {
    half: Option<TxRings>,
    xsk: Rc<Socket>,
    fd: i32,
    buf_size: u32,
    scratch: Box<[u32]>,
    stats: QueueStats,
    /// Completions seen so far (free-running).
    completed: u32,
    /// While the device's queue is full: the `completed` value at which to wake the kernel again.
    busy_until: Option<u32>,
    /// The errno that said the device is gone or down: the queue has failed.
    gone: Option<i32>,
}

impl XdpTxQueue {
    pub(crate) fn new(xsk: Rc<Socket>, name: &str) -> Result<XdpTxQueue, Error> {
        let half = xsk
            .take_tx()
            .ok_or_else(|| Error::config(format!("{name}: the socket's TX half is already taken")))?;
        let size = half.size();
        Ok(XdpTxQueue {
            buf_size: xsk.pool().buf_size(),
            scratch: vec![0; size as usize].into_boxed_slice(),
            stats: QueueStats::default(),
            completed: 0,
            busy_until: None,
            gone: None,
            fd: xsk.raw_fd(),
            half: Some(half),
            xsk,
        })
    }

    /// Frees the buffers of every completion the kernel has posted; returns how many.
    #[inline(always)]
    fn poll_completions(&mut self) -> usize {
        let Some(h) = self.half.as_mut() else { return 0 };
        let (k, bad) = h.complete(&mut self.scratch);
        if k == 0 && bad == 0 {
            return 0;
        }
        self.stats.errors.bad_cqe += u64::from(bad);
        self.completed = self.completed.wrapping_add(k as u32 + bad);
        self.xsk.pool().free_bulk(&self.scratch[..k]);
        k
    }

    /// `sendto` if the kernel asked for it and there is something to send; after an EBUSY, only
    /// once the consumer has completed [`BUSY_BACKOFF`] more frames or holds none of ours.
    /// Returns true when the kernel answered EBUSY (the device dropped a frame).
    #[inline(always)]
    fn kick(&mut self) -> bool {
        if let Some(until) = self.busy_until {
            if !self.busy_wait_over(until) {
                return false;
            }
            self.busy_until = None;
        }
        let Some(h) = self.half.as_ref() else { return false };
        if !h.needs_wakeup() {
            return false;
        }
        match xsk::kick_tx(self.fd) {
            Ok(()) => {}
            Err(libc::EBUSY) => {
                self.busy_until = Some(self.completed.wrapping_add(BUSY_BACKOFF));
                // The kernel completed one frame without sending it (veth counts it in tx_dropped).
                self.stats.drops += 1;
                return true;
            }
            // Out of skbs/completion slots for now: the next burst kicks again.
            Err(libc::EAGAIN | libc::ENOBUFS) => {}
            // The interface was deleted (the socket is unbound) or is down: nothing will ever
            // go out, and counting an error per kick would spin forever.
            Err(e @ (libc::ENXIO | libc::ENETDOWN)) => self.gone = Some(e),
            Err(_) => self.stats.errors.other += 1,
        }
        false
    }

    #[inline(always)]
    fn busy_wait_over(&self, until: u32) -> bool {
        let Some(h) = self.half.as_ref() else { return true };
        // The ring protocol lets the kernel publish its TX consumer index late, so `unconsumed`
        // may count frames it already took, and completed if it dropped them: saturating, the
        // estimate errs towards kicking early, never towards waiting for completions that are
        // not coming.
        let in_kernel = h.in_flight().saturating_sub(h.unconsumed());
        busy_wait_over(until, self.completed, in_kernel)
    }

    /// Wakes the kernel and takes back what it completed, so that a caller never has to call
    /// again for what it already handed over: after a frame the device dropped (EBUSY), the frames
    /// behind it go out in this same call when nothing of ours is left in the kernel (no
    /// completion would come to end the wait). Each EBUSY drops a frame, so this ends.
    #[inline(always)]
    fn kick_and_complete(&mut self) {
        while self.kick() {
            self.poll_completions();
            if self.busy_until.is_some_and(|until| !self.busy_wait_over(until)) {
                return;
            }
        }
        self.poll_completions();
    }

    /// Sends what is still on the TX ring before the socket closes: wake-ups until every frame
    /// is completed, the device is gone, or [`FLUSH_TIMEOUT`] passes (a device that stopped
    /// sending must not hang the caller's teardown).
    fn flush(&mut self) {
        let until = std::time::Instant::now() + FLUSH_TIMEOUT;
        while self.in_flight() > 0 && self.gone.is_none() && std::time::Instant::now() < until {
            self.kick();
            if self.poll_completions() == 0 {
                std::thread::sleep(std::time::Duration::from_micros(20));
            }
        }
        self.poll_completions();
    }
}

impl XdpTxQueue {
    /// Fails once a kick found the device gone or down.
    #[inline(always)]
    fn check_gone(&self) -> Result<(), QueueError> {
        match self.gone {
            None => Ok(()),
            Some(errno) => Err(QueueError::DeviceGone { errno }),
        }
    }
}

/// Fills in the checksums `p`'s flags ask for, as the NIC does for a send WQE's `cs_flags`:
/// the IPv4 header checksum for [`flags::TX_L3_CSUM`], the TCP/UDP checksum over its pseudo-header
/// for [`flags::TX_L4_CSUM`] (IPv4 or IPv6, up to two VLAN tags; a UDP sum of 0 is sent as
/// 0xffff). Frames without those headers, or cut short of what their IP header says, are left as
/// they are.
///
/// # Safety
/// `p` must be a descriptor of a burst over `pool` that the caller holds, with no reference to
/// its bytes live, and must lie inside its buffer (`off + len <= buf_size`).
#[allow(unsafe_code)]
#[inline(never)]
unsafe fn fill_checksums(pool: &Pool, p: &Packet) {
    // SAFETY: descriptors are made only by this crate, with `buf` below the pool's count, so with
    // `off + len <= buf_size` the bytes are in the pool's region; the caller owns and lends them.
    let frame = unsafe { std::slice::from_raw_parts_mut(pool.buf_ptr(p.buf, u32::from(p.off)), usize::from(p.len)) };
    wire::fill_checksums(
        frame,
        p.flags & flags::TX_L3_CSUM != 0,
        p.flags & flags::TX_L4_CSUM != 0,
    );
}

/// Whether a sender holding back after EBUSY may wake the kernel again: the consumer has reached
/// `until` completions, or holds none of our frames (they were all completed, sent or dropped, so
/// no completion is coming to wake us).
#[inline(always)]
fn busy_wait_over(until: u32, completed: u32, in_kernel: u32) -> bool {
    in_kernel == 0 || until.wrapping_sub(completed) as i32 <= 0
}

impl TxQueue for XdpTxQueue {
    #[inline(never)]
    fn tx_burst(&mut self, pkts: &mut Burst) -> Result<usize, QueueError> {
        self.check_gone()?;
        same_pool(self.xsk.pool(), pkts)?;
        let n_req = pkts.len();
        let Some(h) = self.half.as_mut() else { return Ok(0) };
        if n_req == 0 {
            if h.in_flight() > 0 {
                self.kick_and_complete();
            }
            return Ok(0);
        }
        let (at, free) = h.reserve(n_req as u32);
        let mut taken = 0usize;
        let mut written = 0u32;
        let mut bytes = 0u64;
        let mut dropped = 0u64;
        for i in 0..n_req {
            let mut p = &pkts.packets()[i];
            if u32::from(p.off) + u32::from(p.len) > self.buf_size || usize::from(p.len) < wire::ETH_MIN_FRAME {
                // veth and most drivers put a runt on the wire as it is: it is padded here, as
                // a MAC would pad it. Anything else the kernel would refuse (a frame crossing its
                // chunk, counted as tx_invalid_descs, and never completed) or no device can send
                // (shorter than an Ethernet header): dropped here, as the DV path drops what its
                // device would fail.
                let whole = *p;
                if !crate::tx::pad_runt(pkts, i) {
                    // (A chained packet, `len` 0 here, too: this path sends one buffer per
                    // frame; every buffer of it goes back.)
                    self.xsk.pool().free_packet(&whole);
                    dropped += 1;
                    taken += 1;
                    continue;
                }
                p = &pkts.packets()[i];
            }
            if written == free {
                break;
            }
            if p.flags & flags::TX_VLAN != 0 {
                // No tag insertion here (copy mode has no offload, and the frame is sent from
                // its buffer as it is): dropped and counted rather than sent untagged.
                self.xsk.pool().free_packet(p);
                dropped += 1;
                taken += 1;
                continue;
            }
            if p.flags & CSUM != 0 {
                #[allow(unsafe_code)]
                // SAFETY: `p` is in `pkts`, which we hold, over our pool (`same_pool`), in its buffer
                // (checked above), and `pkts` lends out no data while we iterate its descriptors.
                unsafe {
                    fill_checksums(self.xsk.pool(), p)
                };
            }
            h.write(at.wrapping_add(written), p.buf, p.off, p.len);
            bytes += u64::from(p.len);
            written += 1;
            taken += 1;
        }
        if written > 0 {
            h.submit(written);
            self.stats.bursts += 1;
        }
        self.stats.packets += u64::from(written);
        self.stats.bytes += bytes;
        self.stats.drops += dropped;
        pkts.forget_front(taken);
        self.kick_and_complete();
        Ok(taken)
    }

    fn reclaim(&mut self) -> Result<usize, QueueError> {
        self.check_gone()?;
        let before = self.in_flight();
        if before > 0 {
            self.kick_and_complete();
        }
        let freed = before - self.in_flight();
        self.check_gone()?;
        Ok(freed)
    }

    fn in_flight(&self) -> usize {
        self.half.as_ref().map_or(0, |h| h.in_flight() as usize)
    }

    fn stats(&self) -> &QueueStats {
        &self.stats
    }
}

impl Drop for XdpTxQueue {
    fn drop(&mut self) {
        self.flush();
        // Buffers still in flight stay recorded in the half and return when the socket closes.
        if let Some(h) = self.half.take() {
            self.xsk.put_tx(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolConfig;
    use etherparse::PacketBuilder;

    /// IPv4/IPv6 × UDP/TCP frames, some VLAN-tagged, with checksums computed by etherparse.
    fn reference_frames() -> Vec<(&'static str, Vec<u8>)> {
        let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let (v6a, v6b) = (
            "fd00::1".parse::<std::net::Ipv6Addr>().unwrap().octets(),
            "fd00::2".parse::<std::net::Ipv6Addr>().unwrap().octets(),
        );
        let payload: Vec<u8> = (0..=200u8).collect();
        let mut out = Vec::new();
        let mut put = |name, build: &dyn Fn(&mut Vec<u8>)| {
            let mut f = Vec::new();
            build(&mut f);
            out.push((name, f));
        };
        put("ipv4 udp", &|f| {
            PacketBuilder::ethernet2(a, b)
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .udp(1234, 53)
                .write(f, &payload)
                .unwrap()
        });
        put("ipv4 tcp", &|f| {
            PacketBuilder::ethernet2(a, b)
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .tcp(40000, 80, 7, 1024)
                .write(f, &payload[..77])
                .unwrap()
        });
        put("ipv6 udp", &|f| {
            PacketBuilder::ethernet2(a, b)
                .ipv6(v6a, v6b, 64)
                .udp(9, 4789)
                .write(f, &payload[..19])
                .unwrap()
        });
        put("ipv6 tcp", &|f| {
            PacketBuilder::ethernet2(a, b)
                .ipv6(v6a, v6b, 64)
                .tcp(443, 50000, 1, 65535)
                .write(f, &payload)
                .unwrap()
        });
        put("vlan ipv6 udp", &|f| {
            PacketBuilder::ethernet2(a, b)
                .single_vlan(100.try_into().unwrap())
                .ipv6(v6a, v6b, 64)
                .udp(5000, 5001)
                .write(f, &payload[..1])
                .unwrap()
        });
        out
    }

    /// The checksum fields' offsets in a reference frame: (IPv4 header, L4).
    fn checksum_fields(f: &[u8]) -> (Option<usize>, usize) {
        let p = wire::parse(f);
        let l3 = match p.l3 {
            wire::L3::Ipv4 { off, .. } => Some(off + 10),
            _ => None,
        };
        let l4 = match p.l4 {
            wire::L4::Udp { off } => off + 6,
            wire::L4::Tcp { off, .. } => off + 16,
            wire::L4::None => panic!("no L4 header"),
        };
        (l3, l4)
    }

    fn fill(pool: &Pool, b: &Burst) {
        let p = b.packet(0);
        assert!(u32::from(p.off) + u32::from(p.len) <= pool.buf_size());
        #[allow(unsafe_code)]
        // SAFETY: packet 0 of a burst over `pool` that we hold, in its buffer (asserted), and no
        // slice of its data is live.
        unsafe {
            fill_checksums(pool, p)
        };
    }

    #[test]
    fn checksums_are_filled_as_an_independent_builder_computes_them() {
        let pool = Pool::new(PoolConfig {
            buffers: 64,
            ..PoolConfig::default()
        })
        .unwrap();
        for (name, good) in reference_frames() {
            let (l3, l4) = checksum_fields(&good);
            assert_ne!(u16::from_be_bytes([good[l4], good[l4 + 1]]), 0, "{name}: reference");
            for (flag, zero_l3) in [
                (flags::TX_L4_CSUM, false),
                (flags::TX_L3_CSUM | flags::TX_L4_CSUM, true),
            ] {
                let mut f = good.clone();
                f[l4..l4 + 2].copy_from_slice(&[0, 0]);
                if let (Some(c), true) = (l3, zero_l3) {
                    f[c..c + 2].copy_from_slice(&[0, 0]);
                }
                let mut b = Burst::new(&pool, 1);
                assert!(b.push_copy(&f));
                b.set_flags(0, flag);
                fill(&pool, &b);
                assert_eq!(b.data(0), &good[..], "{name}, flags {flag:#x}");
            }
            // TX_L3_CSUM alone leaves the L4 checksum as it is.
            let mut f = good.clone();
            f[l4..l4 + 2].copy_from_slice(&[0, 0]);
            let mut b = Burst::new(&pool, 1);
            assert!(b.push_copy(&f));
            b.set_flags(0, flags::TX_L3_CSUM);
            fill(&pool, &b);
            assert_eq!(b.data(0), &f[..], "{name}: L3 only");
        }
        assert_eq!(pool.free_count(), pool.capacity());
    }

    #[test]
    fn busy_wait_ends_on_enough_completions_or_none_outstanding() {
        assert!(!busy_wait_over(164, 100, 200), "64 completions to go");
        assert!(!busy_wait_over(164, 163, 1), "one to go, one outstanding");
        assert!(busy_wait_over(164, 164, 200), "reached");
        assert!(busy_wait_over(164, 300, 200), "passed");
        assert!(
            busy_wait_over(164, 100, 0),
            "nothing outstanding: nothing would wake us"
        );
        // Free-running counters wrap.
        assert!(!busy_wait_over(20, u32::MAX - 10, 50));
        assert!(busy_wait_over(20, 21, 50));
    }
}
