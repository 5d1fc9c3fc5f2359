//! What the model does each step: doorbells → send WQEs → frames on the wire → receive WQEs →
//! CQEs. Each check says which hardware rule it models and where the rule comes from;
//! `docs/mlx5-notes.md` collects those rules, and what the model chose where no source says.
#![allow(unsafe_code)]

use super::profile::{CqOverrun, FlushCe, LinkMode, Zip};
use super::ring as dma;
use super::{Device, DeviceEvent, Fault, Link, SpecialFlow, CQE_COMP_MAX_NUM, CQN_BASE, WQN_BASE};
use mlx5_prm::{
    cqe_flags, eseg_vlan_insert, syndrome, wqebbs, Be16, Be32, Cqe64, CtrlSeg, ErrCqe, EthSeg, InlineMode, DS_BYTES,
    EMPW_TITLE_DS, ESEG_INLINE_OFFSET, ETH_L2_MIN_HEADER_SIZE, ETH_P_8021Q, ETH_WQE_L3_CSUM, ETH_WQE_L4_CSUM,
    INLINE_SEG, INVALID_LKEY, MAX_WQE_DS, OPCODE_ENHANCED_MPSW, OPCODE_SEND, SEND_WQE_BB, SND_DBR,
};
use mlx5_prm::{mini_array_slot, MiniCqe, MiniFormat, MINI_CQES_PER_SLOT};
use rawpkt_sys::afpacket::Received;
use rawpkt_wire::wire as pkt;
use rawpkt_wire::wire::ETH_MIN_FRAME;

/// A flush CQE in flight (`flush=late:N`): written to CQ `cqn` at step `due`.
pub(super) struct LateCqe {
    pub(super) due: u64,
    pub(super) cqn: u32,
    qpn: u32,
    wqe: u16,
    bytes: [u8; 64],
}

/// Why a send WQE failed, as the syndrome of the REQ_ERR CQE the hardware writes.
struct WqeError {
    synd: u8,
    bbs: u32,
}

/// One piece of a frame being sent: `len` bytes at `ptr`, either inline in the model's copy of
/// the WQE or the range of a gather entry, checked to lie inside a registered MR.
#[derive(Clone, Copy, Debug)]
pub(super) struct Piece {
    ptr: *const u8,
    len: usize,
}

// The `Device` holding the piece list moves between the model's thread and `step()` callers,
// always under the device lock. A piece is made and dereferenced within the execution of one WQE,
// by whichever thread holds that lock for the whole WQE; the list left in `Device` afterwards is
// refilled before it is read again, so a stale pointer is never followed on any thread.
// SAFETY: every dereference happens during one WQE under the device lock (see above).
unsafe impl Send for Piece {}

impl Default for Piece {
    fn default() -> Piece {
        Piece {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }
}

/// One frame of the WQE being executed: pieces `first..end`, `len` bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FrameDesc {
    first: usize,
    end: usize,
    len: usize,
}

/// Bytes of a frame the inline-mode check parses: more than the longest header stack a WQE can be
/// asked to inline (tags, 60 bytes of IPv4 or IPv6 with extension headers, 60 bytes of TCP).
const HEAD_BYTES: usize = 256;

/// A WQE has at most MAX_WQE_DS segments, each at least one DS, and each adds at most one
/// piece (and one frame): neither list can overflow.
const MAX_PIECES: usize = MAX_WQE_DS as usize;

/// Destination and source MAC addresses: where a VLAN insertion puts the tag.
const ETH_MACS: usize = 12;

/// The frames of the WQE being executed, described rather than copied: the pieces each is made
/// of (inline bytes in the WQE copy, gathered ranges of registered memory), in order, and one
/// entry per frame naming its pieces (one frame for a SEND, one per data segment for an eMPW).
/// Fixed arrays with counts: filling them is a store per entry, with no capacity check.
pub(super) struct WqeFrames {
    pieces: [Piece; MAX_PIECES],
    n_pieces: usize,
    frames: [FrameDesc; MAX_PIECES],
    n_frames: usize,
    /// Bytes of all the frames.
    bytes: usize,
    /// Whether a frame is shorter than an Ethernet header or longer than the port sends.
    short_or_long: (usize, usize),
    /// The 802.1Q tag of a VLAN insertion, a piece of the frame ([`WqeFrames::insert_vlan`]);
    /// boxed so that the piece's pointer stays valid however the struct moves.
    vlan_tag: Box<[u8; 4]>,
}

impl Default for WqeFrames {
    fn default() -> WqeFrames {
        WqeFrames {
            pieces: [Piece::default(); MAX_PIECES],
            n_pieces: 0,
            frames: [FrameDesc::default(); MAX_PIECES],
            n_frames: 0,
            bytes: 0,
            short_or_long: (usize::MAX, 0),
            vlan_tag: Box::new([0; 4]),
        }
    }
}

impl WqeFrames {
    fn clear(&mut self) {
        self.n_pieces = 0;
        self.n_frames = 0;
        self.bytes = 0;
        self.short_or_long = (usize::MAX, 0);
    }

    #[inline(always)]
    fn push_piece(&mut self, p: Piece) {
        self.pieces[self.n_pieces] = p;
        self.n_pieces += 1;
    }

    /// The device's VLAN insertion (PRM Ethernet segment; DPDK `MLX5_ETH_WQE_VLAN_INSERT`): an
    /// 802.1Q tag (TPID 0x8100, `tci`) goes into the frame made of all the pieces so far, after
    /// its two MAC addresses (12 bytes). False, changing nothing, for a frame shorter than that.
    /// A SEND that inserts a tag inlines nothing, so it has at most `MAX_PIECES - 2` pieces and
    /// the two this adds (the tag, and the second half of a split piece) fit.
    fn insert_vlan(&mut self, tci: u16) -> bool {
        let mut at = 0;
        let mut j = 0;
        while j < self.n_pieces && at + self.pieces[j].len <= ETH_MACS {
            at += self.pieces[j].len;
            j += 1;
        }
        if at < ETH_MACS && j == self.n_pieces || self.n_pieces + 2 > MAX_PIECES {
            return false;
        }
        self.vlan_tag[..2].copy_from_slice(&ETH_P_8021Q.to_be_bytes());
        self.vlan_tag[2..].copy_from_slice(&tci.to_be_bytes());
        let tag = Piece {
            ptr: self.vlan_tag.as_ptr(),
            len: 4,
        };
        // Piece j holds byte 12 (or the frame ends at 12 exactly, j == n_pieces): split it there.
        let k = ETH_MACS - at;
        let mut insert = [tag, Piece::default()];
        let mut add = 1;
        if j < self.n_pieces && k > 0 {
            let p = self.pieces[j];
            self.pieces[j].len = k;
            insert[1] = Piece {
                ptr: p.ptr.wrapping_add(k),
                len: p.len - k,
            };
            add = 2;
            j += 1;
        }
        self.pieces.copy_within(j..self.n_pieces, j + add);
        self.pieces[j..j + add].copy_from_slice(&insert[..add]);
        self.n_pieces += add;
        true
    }

    /// Ends the frame made of the pieces from `first` on, `len` bytes in all.
    #[inline(always)]
    fn push_frame(&mut self, first: usize, len: usize) {
        self.frames[self.n_frames] = FrameDesc {
            first,
            end: self.n_pieces,
            len,
        };
        self.n_frames += 1;
        self.bytes += len;
        self.short_or_long = (self.short_or_long.0.min(len), self.short_or_long.1.max(len));
    }

    /// The first bytes (up to [`HEAD_BYTES`]) of the frame made of all the pieces so far: where
    /// the device's parser looks for the headers a WQE must inline.
    fn head(&self) -> [u8; HEAD_BYTES] {
        let mut head = [0u8; HEAD_BYTES];
        let mut at = 0;
        for p in &self.pieces[..self.n_pieces] {
            let n = p.len.min(HEAD_BYTES - at);
            // SAFETY: every piece is inline bytes of the WQE copy or a gather range checked to lie
            // in a registered MR, read during the execution of this WQE (see `Piece`).
            unsafe { dma::read(p.ptr, &mut head[at..at + n]) };
            at += n;
            if at == HEAD_BYTES {
                break;
            }
        }
        head
    }

    /// Whether some frame is outside `min..=max` bytes.
    fn bad_len(&self, min: usize, max: usize) -> bool {
        self.short_or_long.0 < min || self.short_or_long.1 > max
    }
}

/// A frame on its way out, still where the driver put it: the model copies its bytes only
/// where something reads them. A frame that reaches no receive queue, no capture and no
/// AF_PACKET socket (a peer port with no RQ, the `Null` wire) is counted by its length and
/// never read: on hardware too nothing observable depends on those bytes, since the NIC's
/// checksum offload changes only the copy that leaves the port.
#[derive(Clone, Copy)]
pub(super) struct Frame<'a> {
    pieces: &'a [Piece],
    len: usize,
    /// The WQE's `cs_flags`: checksums the NIC fills in on the way out.
    csum: u8,
}

impl<'a> Frame<'a> {
    /// A frame that is the whole of `bytes` (injected, or read from an AF_PACKET wire).
    pub(super) fn of_slice(bytes: &'a [u8], slot: &'a mut Piece) -> Frame<'a> {
        *slot = Piece {
            ptr: bytes.as_ptr(),
            len: bytes.len(),
        };
        Frame {
            pieces: std::slice::from_ref(slot),
            len: bytes.len(),
            csum: 0,
        }
    }

    /// The frame's bytes where they are, when it is one piece.
    fn single(&self) -> Option<&'a [u8]> {
        match self.pieces {
            // A `Frame<'a>` is built only over pieces readable and unwritten for 'a: a caller's
            // slice, the model's WQE copy, or a gather range inside a live MR that the driver
            // handed to the device with the doorbell and leaves alone until the completion.
            // SAFETY: as above (`Device::exec_wqe` builds the pieces).
            [p] => Some(unsafe { std::slice::from_raw_parts(p.ptr, p.len) }),
            _ => None,
        }
    }

    /// Copies the bytes as the driver laid them out (before checksum offload) to `dst`.
    ///
    /// # Safety
    /// `[dst, dst + self.len)` must be writable, and overlap no piece.
    unsafe fn copy_to(&self, dst: *mut u8) {
        let mut at = dst;
        for p in self.pieces {
            // SAFETY: the pieces are readable (see `single`), `dst` has room for their sum and
            // overlaps none of them (the caller's contract).
            unsafe {
                std::ptr::copy_nonoverlapping(p.ptr, at, p.len);
                at = at.add(p.len);
            }
        }
    }

    /// The bytes as the driver laid them out, before checksum offload: in place when the frame
    /// is one piece, else assembled in `scratch`. For the parser and RSS, which read no
    /// checksum field.
    fn source<'s>(&self, scratch: &'s mut Vec<u8>) -> &'s [u8]
    where
        'a: 's,
    {
        if let Some(b) = self.single() {
            return b;
        }
        self.assemble(scratch);
        scratch
    }

    /// The bytes as they leave the port, checksums filled in: in place when that changes
    /// nothing, else in `scratch`.
    pub(super) fn wire<'s>(&self, scratch: &'s mut Vec<u8>) -> &'s [u8]
    where
        'a: 's,
    {
        if self.csum & (ETH_WQE_L3_CSUM | ETH_WQE_L4_CSUM) == 0 {
            return self.source(scratch);
        }
        self.assemble(scratch);
        fill_checksums(scratch, self.csum);
        scratch
    }

    fn assemble(&self, scratch: &mut Vec<u8>) {
        scratch.clear();
        for p in self.pieces {
            // SAFETY: the pieces are readable (see `single`).
            scratch.extend_from_slice(unsafe { std::slice::from_raw_parts(p.ptr, p.len) });
        }
    }
}

/// The checksums a send WQE's `cs_flags` ask for (Ethernet segment byte 4:
/// `MLX5_ETH_WQE_L3_CSUM` 0x40, `MLX5_ETH_WQE_L4_CSUM` 0x80), filled into `frame`.
fn fill_checksums(frame: &mut [u8], csum: u8) {
    if csum & (ETH_WQE_L3_CSUM | ETH_WQE_L4_CSUM) != 0 {
        pkt::fill_checksums(frame, csum & ETH_WQE_L3_CSUM != 0, csum & ETH_WQE_L4_CSUM != 0);
    }
}

/// Starts fetching the cache line at `p` (for writing when `write`). Never faults and changes
/// nothing but timing, whatever `p` is.
#[inline(always)]
fn prefetch(p: *const u8, write: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint: it does not fault on any address and has no
        // architectural effect (Intel SDM vol. 2, PREFETCHh and PREFETCHW).
        unsafe {
            if write {
                _mm_prefetch::<_MM_HINT_ET0>(p.cast());
            } else {
                _mm_prefetch::<_MM_HINT_T0>(p.cast());
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, write);
}

/// What a UAR doorbell register holds while no write is pending: a new SQ's register, and the
/// register after the model took a write. A driver's write is the first 8 bytes of a WQE, and a
/// WQE whose first 8 bytes are 0 (opcode NOP, index 0, QPN 0, ds 0) is a write like any other,
/// which the hardware takes and fails with LOCAL_QP_OP; so "nothing written" cannot be 0. All
/// ones is a WQE no driver writes: opcode and opmod 0xff, index 0xffff, QPN 0xffffff and the
/// two reserved bits above `ds` set (the PRM's `qpn_ds` is `qpn << 8 | ds`, `ds` 6 bits). A
/// write of exactly that value is the one the model still takes for no write.
pub(super) const UAR_IDLE: u64 = u64::MAX;

/// WQEBBs a send queue runs per turn at most (`Device::step`), always one WQE: 8 is about one
/// eMPW WQE of a 32-frame burst (about 9 WQEBBs) or 8 SEND WQEs (ConnectX-4), so a probe on
/// another queue waits for about one burst of a busy queue, as a NIC's scheduler arbitrates
/// between queues WQE by WQE. Measured on the model pair with the latency stream's p50
/// (`pktgen --duration 3`; `docs/benchmarks.md`): larger turns leave a probe further behind a
/// busy queue, smaller ones cost the model a doorbell put back more often per ConnectX-4 frame;
/// the driver's counts do not move.
pub const SQ_TURN_BBS: u32 = 8;
/// Turns per step at most: a queue doorbelled faster than the model runs it holds the step (and
/// the device's lock) for 2048 WQEBBs at most, more than a default ring (1024).
const SQ_TURNS: usize = 256;

/// Reads a UAR doorbell register without taking it: a poll that finds nothing leaves the cache
/// line shared instead of pulling it over exclusively, as `take_uar`'s swap would, just for the
/// driver to pull it back with its next doorbell.
///
/// # Safety
/// `p` must be a valid, 8-byte aligned word.
unsafe fn peek_uar(p: *const u8) -> u64 {
    // SAFETY: per the contract.
    unsafe { (*p.cast::<std::sync::atomic::AtomicU64>()).load(std::sync::atomic::Ordering::Relaxed) }
}

/// The WQEBB a doorbell names (the first 8 bytes of a WQE's control segment: `wqe_index` in
/// bytes 1..3, `ds` in byte 7) and the WQEBB after that WQE, both mod 2^16.
fn named_wqe(uar: u64) -> (u32, u32) {
    let b = uar.to_ne_bytes();
    let idx = u32::from(u16::from_be_bytes([b[1], b[2]]));
    (idx, idx.wrapping_add(wqebbs(u32::from(b[7] & 0x3f)).max(1)) & 0xffff)
}

/// How far past `hw_ci` the doorbell `uar` reaches (the end of the WQE it names), if that lies
/// within the `pending` WQEBBs the record published; 0 for a doorbell that does not.
fn reach(uar: u64, hw_ci: u32, pending: u32) -> u32 {
    let ahead = named_wqe(uar).1.wrapping_sub(hw_ci) & 0xffff;
    if ahead <= pending {
        ahead
    } else {
        0
    }
}

/// Takes the last value written to a UAR doorbell register (a NIC latches each write; the model
/// sees the newest one since its last look), leaving [`UAR_IDLE`]; [`UAR_IDLE`] when nothing
/// was written.
///
/// # Safety
/// `p` must be a valid, 8-byte aligned word.
pub(super) unsafe fn take_uar(p: *mut u8) -> u64 {
    // SAFETY: per the contract.
    unsafe { (*p.cast::<std::sync::atomic::AtomicU64>()).swap(UAR_IDLE, std::sync::atomic::Ordering::Acquire) }
}

impl Device {
    pub(super) fn step(&mut self) -> usize {
        // The clock is read when the step first needs it (`now_ns`).
        self.now = None;
        self.steps += 1;
        let mut work = 0;
        if !self.late.is_empty() {
            work += self.write_late();
        }
        // Send queues take turns, each running at most SQ_TURN_BBS of its doorbelled WQEs per
        // turn (`process_sq`), as a NIC's transmit scheduler arbitrates between SQs rather than
        // emptying one before it looks at the next: a frame on a quiet queue (a latency probe)
        // then waits for one turn of each busy queue, not for a busy queue's whole backlog.
        for _ in 0..SQ_TURNS {
            let mut more = false;
            for i in 0..self.sqs.len() {
                if self.sqs[i].is_some() {
                    let (n, left) = self.process_sq(i);
                    work += n;
                    more |= left;
                }
            }
            if !more {
                break;
            }
        }
        for p in 0..self.ports.len() {
            work += self.poll_wire(p);
        }
        self.flush_held();
        work
    }

    /// Doorbell handling: as rdma-core (`post_send_db`), DPDK and VPP ring it, the UAR write
    /// carries the first 8 bytes of the *last* WQE posted and the record the PI after it
    /// (`docs/mlx5-notes.md`, Doorbells). Runs WQEs towards the end of the WQE the UAR names,
    /// [`SQ_TURN_BBS`] WQEBBs' worth at most (always one WQE); returns the WQEs run and whether
    /// the doorbell has WQEs left, in which case it stays latched for the queue's next turn.
    fn process_sq(&mut self, i: usize) -> (usize, bool) {
        let sq = self.sqs[i].as_ref().expect("caller checked");
        // Raw addresses rather than a clone of the `Arc`: two atomic operations per poll saved;
        // the memory lives as long as the SQ object, which nothing removes while `self` is
        // borrowed mutably here.
        let (ring, [bf0, bf1], dbrec) = (sq.mem.ring(), sq.mem.bf_halves(), sq.mem.dbrec());
        let (hw_ci, port, wqe_cnt, error, ready, qpn) = (sq.hw_ci, sq.port, sq.wqe_cnt, sq.error, sq.ready, sq.qpn);
        let fatal = sq.fatal;
        if self.ports[port].link_mode != LinkMode::Up && self.link_holds(port, [bf0, bf1]) {
            // Down or paused: doorbells stay latched until the link runs again.
            return (0, false);
        }
        if !ready || fatal || self.ports[port].dead {
            // A QP outside RTS/ERR, or on a device stopped by a fatal error, ignores its doorbells (the SQ is in RST in the PRM's terms):
            // drop any UAR write so it is not acted on after the QP reaches RTS.
            // SAFETY: both halves of the register belong to this live SQ's memory.
            unsafe {
                take_uar(bf0);
                take_uar(bf1);
            }
            return (0, false);
        }
        // A doorbell comes at either half of the BlueFlame register (`BF_SIZE`): libmlx5
        // alternates them. The register is read before the record: a driver writes the record
        // first, so a doorbell seen here has its record visible below.
        // SAFETY: both halves of the register belong to this live SQ's memory.
        let (a, b) = unsafe {
            let take = |reg: *mut u8| {
                if peek_uar(reg) == UAR_IDLE {
                    UAR_IDLE
                } else {
                    take_uar(reg)
                }
            };
            (take(bf0), take(bf1))
        };
        // SAFETY: the record belongs to this live SQ's memory.
        let record = unsafe { dma::load_dbrec(dbrec.wrapping_add(SND_DBR)) } & 0xffff;
        let pending = record.wrapping_sub(hw_ci) & 0xffff;
        // Both halves written since the last look: the newer doorbell names the WQE further
        // ahead and covers the other, as one write latched after another would.
        let uar = match (a != UAR_IDLE, b != UAR_IDLE) {
            (_, false) => a,
            (false, true) => b,
            (true, true) if reach(b, hw_ci, pending) > reach(a, hw_ci, pending) => b,
            (true, true) => a,
        };
        if uar == UAR_IDLE {
            let sq = self.sqs[i].as_mut().expect("caller checked");
            if pending != 0 && !error {
                sq.unrung_polls += 1;
                if sq.unrung_polls == self.cfg.missing_doorbell_polls {
                    self.counters.doorbell_missing += 1;
                    self.trace_event(format_args!(
                        "DOORBELL-MISSING qpn={qpn:#x} record={record} hw_ci={hw_ci}"
                    ));
                }
            }
            return (0, false);
        }
        self.sqs[i].as_mut().expect("caller checked").unrung_polls = 0;
        self.counters.doorbells += 1;
        // The clock is read again after a doorbell: the step's clock may predate it, and the
        // frames it sends must not arrive dated before the sender read the device clock
        // (`Port::device_clock_ns`, pktgen --hw-timestamps). One read per doorbell, not per CQE.
        self.now = None;
        if self.take_fault(port, |f| matches!(f, Fault::LostDoorbell)).is_some() {
            self.counters.doorbells_lost += 1;
            self.trace_event(format_args!(
                "DOORBELL-LOST qpn={qpn:#x} uar={:016x}",
                u64::from_be_bytes(uar.to_ne_bytes())
            ));
            return (0, false);
        }
        let bytes = uar.to_ne_bytes();
        let (idx, end) = named_wqe(uar);
        let ahead = end.wrapping_sub(hw_ci) & 0xffff;
        // The slot the UAR names is read only if the record says it is published (or already
        // run, for a repeated doorbell): a slot beyond may be half-written by the driver.
        let published = ahead == 0 || (ahead <= pending && ahead <= wqe_cnt);
        let mut in_memory = [0u8; 8];
        if published {
            // SAFETY: slot idx & (wqe_cnt - 1) is inside the SQ ring, and published (above).
            unsafe {
                dma::read(
                    ring.wrapping_add(((idx & (wqe_cnt - 1)) as usize) * SEND_WQE_BB),
                    &mut in_memory,
                )
            };
        }
        if ahead == 0 && in_memory == bytes {
            // A repeated doorbell for WQEs already run (a driver's watchdog ringing again):
            // harmless, and said in the trace.
            self.trace_event(format_args!(
                "DOORBELL-REPEAT qpn={qpn:#x} uar={:016x} record={record}",
                u64::from_be_bytes(bytes)
            ));
            return (0, false);
        }
        let strict_mismatch = self.cfg.strict_doorbell && ahead != pending;
        if ahead == 0 || !published || in_memory != bytes || strict_mismatch {
            self.counters.doorbell_mismatch += 1;
            self.trace_event(format_args!(
                "DOORBELL-MISMATCH qpn={qpn:#x} uar={:016x} record={record} hw_ci={hw_ci}",
                u64::from_be_bytes(bytes)
            ));
            return (0, false);
        }
        // A doorbell the model put back for the queue's next turn (below) is logged again when
        // it is taken again, with `again=1`.
        let again = std::mem::take(&mut self.sqs[i].as_mut().expect("caller checked").put_back) == Some(uar);
        self.trace_event(format_args!(
            "DOORBELL qpn={qpn:#x} uar={:016x} record={record}{}",
            u64::from_be_bytes(bytes),
            if again { " again=1" } else { "" }
        ));
        let mut done = 0;
        let mut left = ahead;
        let mut ran = 0;
        while left > 0 && ran < SQ_TURN_BBS {
            let bbs = self.exec_wqe(i, left);
            left -= bbs.min(left);
            ran += bbs;
            done += 1;
        }
        if left > 0 {
            // The rest at the queue's next turn: the doorbell goes back into the register,
            // unless the driver has rung again since (the newer one names a later WQE and
            // covers these). Counted once, when it was first taken.
            // It goes back into the first half: a doorbell is taken at either (above).
            // SAFETY: the UAR register belongs to this live SQ's memory (above); it is an
            // aligned 8-byte word the driver writes with 8-byte stores.
            let back = unsafe { &*bf0.cast::<std::sync::atomic::AtomicU64>() };
            let _ = back.compare_exchange(
                UAR_IDLE,
                uar,
                std::sync::atomic::Ordering::Release,
                std::sync::atomic::Ordering::Relaxed,
            );
            self.counters.doorbells -= 1;
            self.sqs[i].as_mut().expect("caller checked").put_back = Some(uar);
        }
        (done, left > 0)
    }

    /// Whether port `port`'s link holds its SQs' doorbells back now: down, or paused (the pause
    /// starts at the first doorbell, `registers`, that finds the link paused, and lasts the
    /// knob's ms of device time; then the link is up). Cold: only on a port whose link is not up.
    #[cold]
    #[inline(never)]
    fn link_holds(&mut self, port: usize, registers: [*mut u8; 2]) -> bool {
        match self.ports[port].link_mode {
            LinkMode::Up => false,
            LinkMode::Down => true,
            LinkMode::Pause(ms) => {
                let now = self.now_ns();
                match self.ports[port].pause_until {
                    Some(until) if now >= until => {
                        self.ports[port].link_mode = LinkMode::Up;
                        self.ports[port].pause_until = None;
                        self.trace_event(format_args!("LINK port={port} state=resumed"));
                        false
                    }
                    Some(_) => true,
                    None => {
                        // SAFETY: both halves of the register belong to a live SQ's memory.
                        let rung = registers.iter().any(|&r| unsafe { peek_uar(r) } != UAR_IDLE);
                        if rung {
                            self.ports[port].pause_until = Some(now + u64::from(ms) * 1_000_000);
                            self.trace_event(format_args!("LINK port={port} state=paused ms={ms}"));
                        }
                        rung
                    }
                }
            }
        }
    }

    /// Writes the late flush CQEs whose step has come; returns how many.
    #[cold]
    #[inline(never)]
    fn write_late(&mut self) -> usize {
        let mut n = 0;
        while self.late.front().is_some_and(|l| l.due <= self.steps) {
            let l = self.late.pop_front().expect("just seen");
            self.trace_event(format_args!("FLUSH-LATE qpn={:#x} wqe={}", l.qpn, l.wqe));
            self.write_cqe(l.cqn, &l.bytes);
            n += 1;
        }
        n
    }

    /// Executes the WQE at the SQ's consumer index; returns the WQEBBs it took.
    fn exec_wqe(&mut self, i: usize, left: u32) -> u32 {
        let sq = self.sqs[i].as_ref().expect("caller checked");
        let (ring, pi, mask, qpn, cqn, port, in_error) = (
            sq.mem.ring(),
            sq.hw_ci,
            sq.wqe_cnt - 1,
            sq.qpn,
            sq.cqn,
            sq.port,
            sq.error,
        );
        let read_bb = |wqe: &mut [u8], k: u32| {
            let off = ((pi.wrapping_add(k) & mask) as usize) * SEND_WQE_BB;
            // SAFETY: the slot is inside the ring and below the doorbelled PI.
            unsafe {
                dma::read(
                    ring.wrapping_add(off),
                    &mut wqe[k as usize * SEND_WQE_BB..][..SEND_WQE_BB],
                )
            };
        };
        // The WQE is copied out of the ring (at most MAX_WQE_DS segments) and validated and
        // executed from that snapshot, as the NIC fetches it by DMA.
        let mut wqe = std::mem::take(&mut self.wqe);
        read_bb(&mut wqe, 0);
        let ctrl = ctrl_of(&wqe);
        let ds = ctrl.ds();
        let bbs = wqebbs(ds).clamp(1, left);
        for k in 1..bbs {
            read_bb(&mut wqe, k);
        }
        if (pi & mask) + bbs > mask + 1 {
            self.counters.wrapped_wqes += 1;
        }
        self.counters.wqes += 1;
        if ctrl.imm != 0 {
            self.counters.wqes_nonzero_imm += 1;
        }
        if let Some(t) = self.trace.as_mut() {
            t.wqe(qpn, pi, &wqe[..bbs as usize * SEND_WQE_BB]);
        }
        let signalled = ctrl.completion_mode() >= 2;
        self.tx_sq = i;
        self.tx_max_frame = self.ports[port].max_frame;
        let mut out = self.out.take().expect("put back after every WQE");
        let result = if in_error {
            // After an error every later WQE is flushed. No source says which flushed WQEs get
            // a CQE; we complete the signalled ones with WR_FLUSH_ERR, which is what a driver
            // waiting for its signalled WQEs expects (`docs/mlx5-notes.md`, Completions).
            Err(WqeError {
                synd: syndrome::WR_FLUSH,
                bbs,
            })
        } else if let Some(Fault::TxError { syndrome }) = self.take_fault(port, |f| matches!(f, Fault::TxError { .. }))
        {
            Err(WqeError { synd: syndrome, bbs })
        } else {
            let mode = self.ports[port].inline_mode;
            self.build_frames(&wqe, &ctrl, pi, qpn, left, mode, &mut out)
        };
        let sq = self.sqs[i].as_mut().expect("caller checked");
        let bbs = match result {
            Ok(bbs) => {
                sq.hw_ci = pi.wrapping_add(bbs);
                // `cs_flags`, Ethernet segment byte 4; build_frames checked ds >= 2, so the
                // segment is there.
                let csum = wqe[16 + 4];
                let frames = &out.frames[..out.n_frames];
                if let Some(peer) = self.nothing_reads(port) {
                    // What `transmit_one` and `deliver` would count, frame by frame.
                    let c = &mut self.ports[port].counters;
                    c.tx_frames += frames.len() as u64;
                    c.tx_bytes += out.bytes as u64;
                    if out.short_or_long.0 < ETH_MIN_FRAME {
                        let pad: usize = frames.iter().map(|f| ETH_MIN_FRAME.saturating_sub(f.len)).sum();
                        c.tx_bytes += pad as u64;
                    }
                    if let Some(p) = peer {
                        self.ports[p].counters.rx_unclaimed += frames.len() as u64;
                    }
                } else {
                    self.prefetch_delivery(port, &out);
                    for f in frames {
                        let frame = Frame {
                            pieces: &out.pieces[f.first..f.end],
                            len: f.len,
                            csum,
                        };
                        self.transmit_one(port, &frame);
                    }
                }
                // The hardware writes a CQE only for a WQE that asks for one (CE = 2 in
                // `fm_ce_se`, `MLX5_WQE_CTRL_CQ_UPDATE`).
                if signalled {
                    let mut cqe = Cqe64::req(pi as u16, qpn, self.now_stamp());
                    // The completed WQE's own opcode in sop_drop_qpn[31:24] (0x29 for an eMPW),
                    // which rdma-core's `handle_good_req` (providers/mlx5/cq.c) reads.
                    cqe.sop_drop_qpn = Be32::new(u32::from(ctrl.opcode()) << 24 | qpn);
                    self.write_cqe(cqn, cqe.as_bytes());
                }
                bbs
            }
            Err(WqeError { synd, bbs }) => {
                let first_error = !sq.error;
                sq.error = true;
                sq.hw_ci = pi.wrapping_add(bbs);
                // The failing WQE gets an error CQE even when unsignalled (VPP marks unsignalled
                // WQEs with an `imm` sentinel to recognise exactly those CQEs). Flushed ones: by
                // default only when signalled; under `flush_ce=honour_ce` as their CE field says
                // (DPDK `mlx5_prm.h`: `MLX5_COMP_ONLY_ERR` 0 reports every error, a flush
                // included; `MLX5_COMP_ONLY_FIRST_ERR` 1 only the first; 2 and 3 always).
                let flush_ce = self.cfg.knobs.flush_ce;
                let wanted = first_error
                    || match flush_ce {
                        FlushCe::Signalled => signalled,
                        FlushCe::HonourCe => ctrl.completion_mode() != 1,
                    };
                let flush = self.cfg.knobs.flush;
                let mut write = wanted;
                if wanted && !first_error && flush.partial > 1 {
                    // `flush=partial:K`: only every K-th of them reaches the CQ.
                    sq.flushes += 1;
                    write = sq.flushes.is_multiple_of(flush.partial);
                }
                if write {
                    self.ports[port].counters.tx_error_cqes += 1;
                    let err = ErrCqe::req_err(synd, pi as u16, ctrl.opcode(), qpn);
                    if !first_error && flush.late > 0 {
                        // `flush=late:N`: in flight for N steps, whatever happens to the SQ.
                        self.trace_event(format_args!(
                            "FLUSH-DEFERRED qpn={qpn:#x} wqe={} steps={}",
                            pi as u16, flush.late
                        ));
                        self.late.push_back(LateCqe {
                            due: self.steps + u64::from(flush.late),
                            cqn,
                            qpn,
                            wqe: pi as u16,
                            bytes: *err.as_bytes(),
                        });
                    } else {
                        self.write_cqe(cqn, err.as_bytes());
                    }
                }
                bbs
            }
        };
        self.out = Some(out);
        self.wqe = wqe;
        bbs
    }

    /// Validates a send WQE and describes its frames in `out`. Inline data starts at byte 14 of
    /// the Ethernet segment (`inline_hdr_start`), not at its end; `ds` counts 16-byte units
    /// including the control segment; a WQE that inlines fewer bytes than the port's inline mode
    /// asks of its frame (`InlineMode::header_bytes`: L2 through the last tag, IP, TCP/UDP)
    /// fails with LOCAL_QP_OP (the model's choice: no source says what the hardware does; see
    /// `docs/mlx5-notes.md`, Send WQEs). A WQE runs whole or fails whole: nothing is sent before
    /// every segment of it has been checked.
    #[allow(clippy::too_many_arguments)]
    fn build_frames(
        &self,
        wqe: &[u8],
        ctrl: &CtrlSeg,
        pi: u32,
        qpn: u32,
        left: u32,
        mode: InlineMode,
        out: &mut WqeFrames,
    ) -> Result<u32, WqeError> {
        let ds = ctrl.ds();
        let bbs = wqebbs(ds).clamp(1, left);
        let qp_op = Err(WqeError {
            synd: syndrome::LOCAL_QP_OP,
            bbs,
        });
        if ctrl.opmod() != 0 || u32::from(ctrl.wqe_index()) != pi & 0xffff || ctrl.qpn() != qpn {
            return qp_op;
        }
        if !(2..=MAX_WQE_DS).contains(&ds) || wqebbs(ds) > left {
            return qp_op;
        }
        let wqe = &wqe[..ds as usize * DS_BYTES];
        let eseg = &wqe[16..];
        let vlan_insert = eseg_vlan_insert(eseg);
        // With a VLAN insertion the dword holds the tag, and nothing is inlined (read as a size,
        // 0x8000 is more than any WQE holds: no eMPW title accepts it).
        if vlan_insert.is_some() && !self.cfg.knobs.vlan_insert {
            // A device without `wqe_vlan_insert` (the knob off): the model fails the WQE, as
            // it fails any WQE asking for what the device does not do (model's choice,
            // `docs/mlx5-notes.md`, Send WQEs).
            return qp_op;
        }
        let inline = if vlan_insert.is_some() {
            0
        } else {
            usize::from(u16::from_be_bytes([eseg[12], eseg[13]]))
        };
        out.clear();
        let max = self.tx_max_frame;
        match ctrl.opcode() {
            OPCODE_SEND => {
                let eseg_ds = EthSeg::ds_for_inline(inline);
                if 1 + eseg_ds > ds {
                    return qp_op;
                }
                if inline > 0 {
                    out.push_piece(Piece {
                        ptr: eseg[ESEG_INLINE_OFFSET..ESEG_INLINE_OFFSET + inline].as_ptr(),
                        len: inline,
                    });
                }
                let mut total = inline;
                let mut off = (1 + eseg_ds as usize) * DS_BYTES;
                while off < wqe.len() {
                    off = self
                        .gather(wqe, off, out, &mut total)
                        .map_err(|synd| WqeError { synd, bbs })?;
                }
                if let Some(tci) = vlan_insert {
                    // The tag goes in before the inline-mode check: it is part of the L2 header
                    // the device's parser sees (and a device that needs inline headers gets none
                    // here, so it fails the WQE, as DPDK never asks it to).
                    if !out.insert_vlan(tci) {
                        return Err(WqeError {
                            synd: syndrome::LOCAL_LENGTH,
                            bbs,
                        });
                    }
                    total += 4;
                }
                if mode != InlineMode::None && inline < mode.header_bytes(&out.head(), total) {
                    return qp_op;
                }
                out.push_frame(0, total);
            }
            OPCODE_ENHANCED_MPSW if vlan_insert.is_some() => return qp_op,
            OPCODE_ENHANCED_MPSW => {
                // DPDK `mlx5_tx_burst_empw_*`: title = control + a 16-byte Ethernet segment with no
                // inline header; every data segment after it is one packet. Devices that need a
                // minimum inline cannot do it (DPDK turns eMPW off for them).
                if !self.cfg.enhanced_mpw || mode != InlineMode::None || ds <= EMPW_TITLE_DS || inline != 0 {
                    return qp_op;
                }
                let mut off = EMPW_TITLE_DS as usize * DS_BYTES;
                if self.empw_plain(&wqe[off..], out) {
                    off = wqe.len();
                } else {
                    out.clear();
                }
                // The general loop: for a WQE with inline packets, or one that fails a check
                // (redone here from the start, so that the first failing segment names the
                // syndrome): each gather entry, or inline run, is one packet.
                while off < wqe.len() {
                    let first = out.n_pieces;
                    let mut len = 0;
                    off = self
                        .gather(wqe, off, out, &mut len)
                        .map_err(|synd| WqeError { synd, bbs })?;
                    out.push_frame(first, len);
                }
            }
            _ => return qp_op,
        }
        if out.bad_len(ETH_L2_MIN_HEADER_SIZE, max) {
            return Err(WqeError {
                synd: syndrome::LOCAL_LENGTH,
                bbs,
            });
        }
        Ok(bbs)
    }

    /// The eMPW data segments `segs` when every one of them is a gather entry of 1 to
    /// `max_frame` bytes inside the MR that the first one names, the common case: each gets the
    /// checks `gather` makes, in one pass with no lookup. Returns false, with `out` partly
    /// filled, when a segment is anything else or fails a check.
    #[inline(always)]
    fn empw_plain(&self, segs: &[u8], out: &mut WqeFrames) -> bool {
        let n = segs.len() / DS_BYTES;
        let Some(first) = segs.get(..DS_BYTES) else {
            return false;
        };
        let lkey = u32::from_be_bytes([first[4], first[5], first[6], first[7]]);
        let Some(mr) = self.mr(lkey) else {
            return false;
        };
        if n > MAX_PIECES {
            return false;
        }
        let (base, size) = (mr.base, mr.len);
        // An inline segment has bit 31 set, so one compare refuses it, 0 and anything longer
        // than a frame (max_frame is far below 2^31).
        let max = self.tx_max_frame.min(i32::MAX as usize) as u64;
        let (mut lo, mut hi, mut bytes) = (u64::MAX, 0u64, 0u64);
        let dst = out.pieces.iter_mut().zip(out.frames.iter_mut());
        for (k, (seg, (p, f))) in segs.chunks_exact(DS_BYTES).zip(dst).enumerate() {
            let len = u64::from(u32::from_be_bytes([seg[0], seg[1], seg[2], seg[3]]));
            let key = u32::from_be_bytes([seg[4], seg[5], seg[6], seg[7]]);
            let addr = u64::from_be_bytes(seg[8..].try_into().expect("8 bytes"));
            // MR containment as `Mr::contains`: `addr - base` wraps above `size` when
            // `addr < base`.
            if len.wrapping_sub(1) >= max || key != lkey || len > size || addr.wrapping_sub(base) > size - len {
                return false;
            }
            *p = Piece {
                ptr: addr as *const u8,
                len: len as usize,
            };
            *f = FrameDesc {
                first: k,
                end: k + 1,
                len: len as usize,
            };
            lo = lo.min(len);
            hi = hi.max(len);
            bytes += len;
        }
        out.n_pieces = n;
        out.n_frames = n;
        out.bytes = bytes as usize;
        out.short_or_long = (lo as usize, hi as usize);
        true
    }

    /// Checks the data segment at `off` of `wqe` (inline, or a gather entry inside a registered
    /// MR) and adds its bytes to the frame being built, `frame_len` bytes long so far, as a
    /// piece; returns the offset of the next segment or the syndrome.
    fn gather(&self, wqe: &[u8], off: usize, out: &mut WqeFrames, frame_len: &mut usize) -> Result<usize, u8> {
        let byte_count = u32::from_be_bytes(wqe[off..off + 4].try_into().expect("4 bytes"));
        if byte_count & INLINE_SEG != 0 {
            let len = (byte_count & !INLINE_SEG) as usize;
            if off + 4 + len > wqe.len() {
                return Err(syndrome::LOCAL_QP_OP);
            }
            if len > 0 {
                out.push_piece(Piece {
                    ptr: wqe[off + 4..off + 4 + len].as_ptr(),
                    len,
                });
            }
            *frame_len += len;
            return Ok(off + (4 + len).div_ceil(DS_BYTES) * DS_BYTES);
        }
        let lkey = u32::from_be_bytes(wqe[off + 4..off + 8].try_into().expect("4 bytes"));
        let addr = u64::from_be_bytes(wqe[off + 8..off + 16].try_into().expect("8 bytes"));
        if byte_count == 0 {
            // A zero-length gather has no documented meaning (rdma-core skips such SGEs, DPDK
            // never makes one): fail the WQE so that a driver that writes one notices.
            return Err(syndrome::LOCAL_QP_OP);
        }
        if *frame_len + byte_count as usize > self.tx_max_frame {
            return Err(syndrome::LOCAL_LENGTH);
        }
        let src = self
            .mr_range(lkey, addr, u64::from(byte_count))
            .ok_or(syndrome::LOCAL_PROT)?;
        out.push_piece(Piece {
            ptr: src,
            len: byte_count as usize,
        });
        *frame_len += byte_count as usize;
        Ok(off + DS_BYTES)
    }

    /// The MR named by `lkey`.
    #[inline]
    fn mr(&self, lkey: u32) -> Option<&super::Mr> {
        self.mrs.get(lkey.wrapping_sub(super::LKEY_BASE) as usize)?.as_ref()
    }

    /// The address of `[addr, addr + len)` if it lies inside the MR named by `lkey`.
    #[inline]
    pub(super) fn mr_range(&self, lkey: u32, addr: u64, len: u64) -> Option<*mut u8> {
        self.mr(lkey)?.contains(addr, len).then_some(addr as *mut u8)
    }

    /// Whether nothing on the far side of `port`'s wire reads the bytes of the frames sent on
    /// it: the `Null` wire, or a peer port with no receive queue, no flow steering and no fault
    /// waiting for a frame, and no sniffer on `port` itself. Frames sent then are counted
    /// without being looked at.
    fn nothing_reads(&self, port: usize) -> Option<Option<usize>> {
        if self.ports[port].taps {
            return None; // a sniffer or the port's own steering reads what the port sends
        }
        match self.ports[port].link {
            Link::Null => Some(None),
            Link::Peer(p) => {
                let q = &self.ports[p];
                (q.rqs.is_empty() && q.steering.is_none() && q.faults.is_empty()).then_some(Some(p))
            }
            _ => None,
        }
    }

    /// Before a WQE's frames are delivered one by one to the single RQ of the peer port: starts
    /// fetching every frame's first bytes and the receive buffer each will land in, so that the
    /// cache misses of the whole WQE overlap instead of coming one per frame (a NIC's DMA engine
    /// has many reads in flight too). Prefetches have no effect but timing: nothing is read or
    /// written here but the RQ's posted WQEs, and a wrong guess only costs a wasted fetch.
    fn prefetch_delivery(&mut self, port: usize, out: &WqeFrames) {
        let Link::Peer(peer) = self.ports[port].link else {
            return;
        };
        let q = &self.ports[peer];
        if q.steering.is_some() || q.rqs.len() != 1 {
            return;
        }
        let ri = q.rqs[0].wrapping_sub(WQN_BASE) as usize;
        let Some(rq) = self.rqs.get_mut(ri).and_then(Option::as_mut) else {
            return;
        };
        if rq.error || rq.state != super::RqState::Ready {
            return;
        }
        let frames = &out.frames[..out.n_frames];
        for f in frames {
            let p = &out.pieces[f.first];
            prefetch(p.ptr, false);
        }
        let mut avail = rq.posted.wrapping_sub(rq.hw_ci) & 0xffff;
        if (avail as usize) < frames.len() {
            // SAFETY: the record word belongs to this live RQ.
            rq.posted = unsafe { dma::load_dbrec(rq.mem.dbrec()) } & 0xffff;
            avail = rq.posted.wrapping_sub(rq.hw_ci) & 0xffff;
        }
        let ring = rq.mem.ring();
        for k in 0..frames.len().min(avail as usize) {
            let slot = (rq.hw_ci.wrapping_add(k as u32) & (rq.wqe_cnt - 1)) as usize;
            let mut addr = [0u8; 8];
            // SAFETY: the slot is inside the RQ ring and below the posted counter: the driver
            // wrote it before publishing the record and leaves it alone until its CQE.
            unsafe { dma::read(ring.wrapping_add(slot * 16 + 8), &mut addr) };
            prefetch(u64::from_be_bytes(addr) as *const u8, true);
        }
    }

    /// Puts one frame on the port's wire, padded with zeros to the Ethernet minimum as the MAC
    /// does.
    fn transmit_one(&mut self, port: usize, frame: &Frame<'_>) {
        if frame.len < ETH_MIN_FRAME {
            let mut padded = [0u8; ETH_MIN_FRAME];
            let mut scratch = std::mem::take(&mut self.scratch);
            padded[..frame.len].copy_from_slice(frame.wire(&mut scratch));
            self.scratch = scratch;
            let mut slot = Piece::default();
            return self.transmit_one(port, &Frame::of_slice(&padded, &mut slot));
        }
        let c = &mut self.ports[port].counters;
        c.tx_frames += 1;
        c.tx_bytes += frame.len as u64;
        if self.ports[port].taps {
            self.tap_tx(port, frame);
        }
        if self.cfg.knobs.wire.any() {
            return self.impaired(port, frame);
        }
        self.onto_link(port, frame);
    }

    /// A frame on an impaired wire ([`crate::Impairment`]): lost, sent twice, held back, or
    /// sent; and then the frame held back before it, if any.
    #[cold]
    #[inline(never)]
    fn impaired(&mut self, port: usize, frame: &Frame<'_>) {
        let rules = self.cfg.knobs.wire;
        let every = |k: u64, n: u64| k != 0 && n.is_multiple_of(k);
        let p = &mut self.ports[port];
        p.impaired += 1;
        let n = p.impaired;
        if every(rules.drop_every, n) {
            // A frame held back waits for the next frame that leaves.
            p.counters.wire_dropped += 1;
            return;
        }
        let held = p.held.take();
        if every(rules.duplicate_every, n) {
            p.counters.wire_duplicated += 1;
            self.onto_link(port, frame);
            self.onto_link(port, frame);
        } else if every(rules.swap_every, n) && held.is_none() {
            p.counters.wire_swapped += 1;
            let mut scratch = std::mem::take(&mut self.scratch);
            self.ports[port].held = Some(frame.wire(&mut scratch).to_vec());
            self.scratch = scratch;
        } else {
            self.onto_link(port, frame);
        }
        if let Some(bytes) = held {
            let mut slot = Piece::default();
            self.onto_link(port, &Frame::of_slice(&bytes, &mut slot));
        }
    }

    /// A frame leaves on the port's link.
    fn onto_link(&mut self, port: usize, frame: &Frame<'_>) {
        match &mut self.ports[port].link {
            Link::Peer(peer) => {
                let peer = *peer;
                self.deliver(peer, frame);
            }
            Link::Loopback => self.deliver(port, frame),
            Link::Capture(q) => q.push_back(frame.wire(&mut self.scratch).to_vec()),
            Link::AfPacket(sock) => {
                if !sock.send(frame.wire(&mut self.scratch)) {
                    self.ports[port].counters.tx_wire_errors += 1;
                }
            }
            // Nothing reads the frame: counted, never copied.
            Link::Null => {}
        }
    }

    /// What reads a frame `port` sends besides its wire: the port's sniffers and its local
    /// loopback. Out of line: on most ports neither is there, and the send path then pays one
    /// test of `PortState::taps` per frame.
    #[cold]
    #[inline(never)]
    fn tap_tx(&mut self, port: usize, frame: &Frame<'_>) {
        if self.ports[port].steering.as_ref().is_some_and(super::Steering::sniffs) {
            self.sniff_tx(port, frame);
        }
        if self.ports[port].local_lb {
            self.loop_back(port, frame);
        }
    }

    /// Local loopback of a frame `port` sends (its vport's local loopback is on): a frame to
    /// the port's own MAC, to a group or broadcast comes back in and is steered, carrying the
    /// sending TIS's transport domain for the TIRs' self-loopback check (`deliver_to_tirs`).
    /// It also leaves on the wire: no source read says whether the NIC withholds a looped
    /// unicast frame from the wire, and a frame to a group goes to both.
    fn loop_back(&mut self, port: usize, frame: &Frame<'_>) {
        let mut first = [0u8; 6];
        let mut at = 0;
        for p in frame.pieces {
            let n = p.len.min(6 - at);
            // SAFETY: the pieces are readable (see `Frame::single`).
            first[at..at + n].copy_from_slice(unsafe { std::slice::from_raw_parts(p.ptr, n) });
            at += n;
            if at == 6 {
                break;
            }
        }
        let local = first[0] & 1 != 0 || self.ports[port].mac == Some(first);
        if !local || self.looped_from.is_some() {
            return;
        }
        self.looped_from = Some(self.sqs.get(self.tx_sq).and_then(Option::as_ref).map_or(0, |sq| sq.td));
        self.deliver(port, frame);
        self.looped_from = None;
    }

    fn poll_wire(&mut self, port: usize) -> usize {
        if !matches!(self.ports[port].link, Link::AfPacket(_)) {
            return 0;
        }
        let mut buf = std::mem::take(&mut self.rxbuf);
        let mut n = 0;
        while n < 64 {
            let got = match &mut self.ports[port].link {
                Link::AfPacket(sock) => sock.recv(&mut buf),
                _ => None,
            };
            match got {
                Some(Received::Frame(len)) => {
                    let mut slot = Piece::default();
                    let frame = Frame::of_slice(&buf[..len], &mut slot);
                    self.deliver(port, &frame);
                }
                Some(Received::Truncated(_)) => self.ports[port].counters.rx_wire_drops += 1,
                None => break,
            }
            n += 1;
        }
        self.rxbuf = buf;
        n
    }

    /// A frame arrives on `port`: RSS picks an RQ, the frame is scattered into its next WQE.
    pub(super) fn deliver(&mut self, port: usize, frame: &Frame<'_>) {
        if self.ports[port].dead {
            return;
        }
        if self.ports[port].link_mode == LinkMode::Down {
            self.ports[port].counters.rx_wire_drops += 1;
            return;
        }
        if let Some(pps) = self.cfg.rx_capacity_pps {
            // A buffer of `rx_buffer_s` worth (50 ms by default), full at the first frame, as a
            // device under test has one. So a run of T seconds loses nothing up to
            // pps × (1 + rx_buffer_s / T).
            //
            // The clock is the step's. A device runs all the time; the model's thread does not:
            // the frames a step finds after the thread lost its CPU came at any time since the
            // last step, and the device would have taken them as they came, drawing on what the
            // buffer refilled meanwhile. That refill beyond the buffer's depth is lent to this
            // step's frames (and only to them): the host's scheduling makes no loss of its own,
            // while a burst that comes within one step gets the buffer alone.
            let (now, step) = (self.now_ns(), self.steps);
            let depth = (pps * self.cfg.rx_buffer_s).max(64.0);
            let (mut tokens, last, mut lent, lent_to) = match self.ports[port].bucket {
                (_, 0, _, _) => (depth, now, 0.0, step),
                b => b,
            };
            let level = tokens + now.saturating_sub(last) as f64 * pps / 1e9;
            tokens = level.min(depth);
            if lent_to != step {
                lent = 0.0;
            }
            lent += (level - depth).max(0.0);
            if tokens >= 1.0 {
                tokens -= 1.0;
            } else if lent >= 1.0 {
                lent -= 1.0;
            } else {
                self.ports[port].bucket = (tokens, now, lent, step);
                self.ports[port].counters.rx_wire_drops += 1;
                return;
            }
            self.ports[port].bucket = (tokens, now, lent, step);
        }
        let no_buffer = self.take_fault(port, |f| matches!(f, Fault::RxNoBuffer { .. }));
        if let Some(Fault::RxNoBuffer { frames }) = no_buffer {
            if frames > 1 {
                self.ports[port]
                    .faults
                    .push_front(Fault::RxNoBuffer { frames: frames - 1 });
            }
        }
        if self.ports[port].steering.is_some() {
            self.steer(port, frame, no_buffer.is_some());
            return;
        }
        let rqs = &self.ports[port].rqs;
        match rqs.len() {
            // No queue reads the frame: counted without looking at its bytes.
            0 => self.ports[port].counters.rx_unclaimed += 1,
            // One queue takes every hash: the frame goes straight into its buffer, and is parsed
            // and hashed there (`rx_into`).
            1 => {
                let wq = rqs[0];
                self.rx_into(port, wq, frame, None, no_buffer.is_some());
            }
            _ => {
                let mut scratch = std::mem::take(&mut self.scratch);
                let bytes = frame.source(&mut scratch);
                let parsed = pkt::parse(bytes);
                let hash = self.rss_hash(bytes, &parsed);
                // Indirection table of a power-of-two size filled round robin (VPP), indexed by
                // the low bits of the hash (an assumption: no source says how the TIR indexes
                // it; `docs/mlx5-notes.md`, Receive side scaling).
                let rqs = &self.ports[port].rqs;
                let table = rqs.len().next_power_of_two();
                let wq = rqs[(hash as usize & (table - 1)) % rqs.len()];
                self.rx_into(port, wq, frame, Some((&parsed, hash)), no_buffer.is_some());
                self.scratch = scratch;
            }
        }
    }

    /// The port's default RSS hash (Toeplitz over addresses and TCP/UDP ports).
    pub(super) fn rss_hash(&self, frame: &[u8], parsed: &pkt::Parsed) -> u32 {
        let mut input = [0u8; 36];
        let n = pkt::rss_input(frame, parsed, &mut input);
        self.rss.hash(&input[..n])
    }

    /// A frame arrives on a port behind flow steering (mlx5_ib `fs.c`): every sniffer gets a
    /// copy (`MLX5_FLOW_NAMESPACE_SNIFFER_RX`, a root beside the NIC RX one); in the bypass
    /// namespace every copy (DONT_TRAP) match and the stealing match, if any, deliver to their
    /// TIR; a frame nothing steals goes on to the kernel's tables: Linux's when its netdev
    /// takes it, else on to the leftovers namespace (ALL_DEFAULT, and MC_DEFAULT for
    /// multicast), else dropped.
    fn steer(&mut self, port: usize, frame: &Frame<'_>, no_buffer: bool) {
        let mut scratch = std::mem::take(&mut self.scratch);
        let bytes = frame.wire(&mut scratch);
        let mut tirs = [0usize; 16];
        let mut n = 0;
        if let Some(st) = self.ports[port].steering.as_ref() {
            let mut push = |tir: usize| {
                if n < tirs.len() {
                    tirs[n] = tir;
                    n += 1;
                }
            };
            for f in st.special.iter().filter(|f| f.1 == SpecialFlow::Sniffer) {
                push(f.2);
            }
            let verdict = st.set.classify(bytes);
            for i in verdict.copy_rules().chain(verdict.stolen_by) {
                push(st.flows[i].2);
            }
            if verdict.to_linux() {
                if st.netdev_accepts(bytes.get(..6).unwrap_or(&[])) {
                    self.ports[port].counters.rx_unclaimed += 1;
                } else {
                    let multicast = bytes.first().is_some_and(|b| b & 1 != 0);
                    let mut taken = false;
                    for f in &st.special {
                        if f.1 == SpecialFlow::AllDefault || (f.1 == SpecialFlow::McDefault && multicast) {
                            push(f.2);
                            taken = true;
                        }
                    }
                    if !taken {
                        self.ports[port].counters.rx_steer_missed += 1;
                    }
                }
            }
        }
        if n > 0 {
            self.deliver_to_tirs(port, &tirs[..n], frame, bytes, no_buffer);
        }
        self.scratch = scratch;
    }

    /// Delivers `frame` (whose bytes as on the wire are `bytes`) once to each TIR of `tirs`:
    /// Toeplitz over the TIR's fields picks the WQ of its table.
    fn deliver_to_tirs(&mut self, port: usize, tirs: &[usize], frame: &Frame<'_>, bytes: &[u8], no_buffer: bool) {
        let parsed = pkt::parse(bytes);
        for &tir in tirs {
            let Some(t) = self.tirs.get(tir).and_then(Option::as_ref) else {
                continue;
            };
            if let Some(td) = self.looped_from {
                // Self-loopback: a TIR takes a looped frame of its own transport domain only
                // if its `self_lb_block` bit for that kind of address is set (mlx5_ib
                // `create_raw_packet_qp_tir` sets them for the ALLOW_SELF_LB flags).
                let bit = if bytes.first().is_some_and(|b| b & 1 != 0) {
                    super::TIR_SELF_LB_MC
                } else {
                    super::TIR_SELF_LB_UC
                };
                if td != 0 && td == t.td && t.self_lb & bit == 0 {
                    continue;
                }
            }
            let mut input = [0u8; 36];
            let len = rss_input_fields(bytes, &parsed, t.fields, &mut input);
            let hash = if len == 0 { 0 } else { t.rss.hash(&input[..len]) };
            let wq = t.table[hash as usize & (t.table.len() - 1)];
            self.rx_into(port, wq, frame, Some((&parsed, hash)), no_buffer);
        }
    }

    /// A frame leaves `port`: each sniffer of the port gets a copy
    /// (`MLX5_FLOW_NAMESPACE_SNIFFER_TX`), as it leaves, checksums filled in.
    fn sniff_tx(&mut self, port: usize, frame: &Frame<'_>) {
        let mut tirs = [0usize; 16];
        let mut n = 0;
        if let Some(st) = self.ports[port].steering.as_ref() {
            for f in st.special.iter().filter(|f| f.1 == SpecialFlow::Sniffer) {
                if n < tirs.len() {
                    tirs[n] = f.2;
                    n += 1;
                }
            }
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let bytes = frame.wire(&mut scratch);
        self.deliver_to_tirs(port, &tirs[..n], frame, bytes, false);
        self.scratch = scratch;
    }

    /// Scatters `frame` into the next posted WQE of `wq` and completes it. `pre` is the
    /// frame's parse and RSS hash when the caller needed them to pick `wq`; otherwise they are
    /// taken from the received copy.
    fn rx_into(&mut self, port: usize, wq: u32, frame: &Frame<'_>, pre: Option<(&pkt::Parsed, u32)>, no_buffer: bool) {
        let ri = wq.wrapping_sub(WQN_BASE) as usize;
        let Some(rq) = self.rqs.get_mut(ri).and_then(Option::as_mut) else {
            return;
        };
        if rq.striding.is_some() {
            return self.rx_striding(port, wq, frame, pre, no_buffer);
        }
        if rq.error || rq.state != super::RqState::Ready {
            self.ports[port].counters.rx_wq_error += 1;
            return;
        }
        if rq.hw_ci & 0xffff == rq.posted {
            // SAFETY: the record word belongs to this live RQ.
            let record = unsafe { dma::load_dbrec(rq.mem.dbrec()) } & 0xffff;
            if record != rq.posted {
                if let Some(t) = self.trace.as_mut() {
                    t.rdb(wq, record);
                }
            }
            rq.posted = record;
        }
        if no_buffer || rq.hw_ci & 0xffff == rq.posted {
            rq.pending_drops = rq.pending_drops.saturating_add(1);
            self.ports[port].counters.rx_out_of_buffer += 1;
            return;
        }
        let slot = (rq.hw_ci & (rq.wqe_cnt - 1)) as usize;
        let (cqn, counter) = (rq.cqn, rq.hw_ci as u16);
        rq.hw_ci = rq.hw_ci.wrapping_add(1);
        if !rq.plain {
            self.rx_scatter(port, wq, slot, cqn, counter, frame, pre);
            return;
        }
        let mut seg = [0u8; 16];
        // SAFETY: slot is inside the RQ ring and below the posted counter.
        unsafe { dma::read(rq.mem.ring().wrapping_add(slot * 16), &mut seg) };
        let (byte_count, lkey, addr) = data_seg(&seg);
        if let Some(t) = self.trace.as_mut() {
            t.rwqe(wq, u32::from(counter), &seg);
        }
        let injected = self.take_fault(port, |f| matches!(f, Fault::RxError { .. }));
        let failure = if let Some(Fault::RxError { syndrome }) = injected {
            Some(syndrome)
        } else if lkey == INVALID_LKEY {
            Some(syndrome::LOCAL_QP_OP)
        } else if self.mr_range(lkey, addr, u64::from(byte_count)).is_none() {
            Some(syndrome::LOCAL_PROT)
        } else if frame.len > byte_count as usize {
            Some(syndrome::LOCAL_LENGTH)
        } else {
            None
        };
        if let Some(synd) = failure {
            self.rx_failed(port, wq, cqn, counter, synd);
            return;
        }
        let dst = addr as *mut u8;
        // `[addr, addr + byte_count)` lies in a live MR and holds the frame (both checked above),
        // and was handed to the device by the RQ doorbell: the driver neither reads nor writes
        // it until the CQE below. It is receive memory, so no piece of the frame (send buffers,
        // the WQE copy, the model's own buffers) lies in it.
        // SAFETY: as above.
        let buf = unsafe {
            frame.copy_to(dst);
            std::slice::from_raw_parts_mut(dst, frame.len)
        };
        fill_checksums(buf, frame.csum);
        if let Some(t) = self.trace.as_mut() {
            t.rxd(wq, addr, frame.len);
        }
        let parsed_here;
        let (parsed, hash) = match pre {
            Some(p) => p,
            None => {
                parsed_here = pkt::parse(buf);
                (&parsed_here, self.rss_hash(buf, &parsed_here))
            }
        };
        let flags = hdr_type_etc(buf, parsed);
        self.rx_done(port, wq, cqn, counter, frame.len, hash, flags, 0);
    }

    /// [`Device::rx_into`] for a WQ whose WQEs hold several data segments or that has receive
    /// offloads (`RqOptions`): the frame is first made what the queue receives (checksums of
    /// the sender's offload filled in, an 802.1Q tag taken out when stripping, the FCS of the
    /// frame as on the wire appended when scattering it), then scattered across the WQE's data
    /// segments in order. The scatter list ends at the WQE's end or at the first segment with
    /// the invalid lkey (rdma-core `mlx5_post_wq_recv` writes one after the SGEs when fewer than
    /// the WQE holds); a frame longer than the segments' sum is a local length error (PRM:
    /// receive WQE = array of data segments).
    #[allow(clippy::too_many_arguments)]
    fn rx_scatter(
        &mut self,
        port: usize,
        wq: u32,
        slot: usize,
        cqn: u32,
        counter: u16,
        frame: &Frame<'_>,
        pre: Option<(&pkt::Parsed, u32)>,
    ) {
        let rq = self.rqs[wq.wrapping_sub(WQN_BASE) as usize].as_ref().expect("live");
        let (stride, fcs, strip) = (rq.stride as usize, rq.scatter_fcs, rq.strip_cvlan);
        let mut wqe = [0u8; 16 * super::MAX_RQ_SGE as usize];
        // SAFETY: the WQE at slot is inside the RQ ring (stride bytes per WQE) and posted.
        unsafe { dma::read(rq.mem.ring().wrapping_add(slot * stride), &mut wqe[..stride]) };
        if let Some(t) = self.trace.as_mut() {
            t.rwqe(wq, u32::from(counter), &wqe[..stride]);
        }
        let segs = wqe[..stride]
            .chunks_exact(16)
            .map(|s| data_seg(s.try_into().expect("16 bytes")))
            .take_while(|&(_, lkey, _)| lkey != INVALID_LKEY);
        let mut buf = std::mem::take(&mut self.delivered);
        frame.assemble(&mut buf);
        fill_checksums(&mut buf, frame.csum);
        let parsed_here;
        let (parsed, hash) = match pre {
            Some(p) => p,
            None => {
                parsed_here = pkt::parse(&buf);
                (&parsed_here, self.rss_hash(&buf, &parsed_here))
            }
        };
        let mut flags = hdr_type_etc(&buf, parsed);
        let wire_fcs = fcs.then(|| fcs32(&buf));
        let mut vlan = 0;
        if strip && buf.len() >= 18 && buf[12..14] == [0x81, 0x00] {
            vlan = u16::from_be_bytes([buf[14], buf[15]]);
            buf.drain(12..16);
            flags |= cqe_flags::VLAN_STRIPPED;
        }
        if let Some(f) = wire_fcs {
            buf.extend_from_slice(&f.to_le_bytes());
        }
        let injected = self.take_fault(port, |f| matches!(f, Fault::RxError { .. }));
        let mut room = 0u64;
        let failure = if let Some(Fault::RxError { syndrome }) = injected {
            Some(syndrome)
        } else if wqe[4..8] == INVALID_LKEY.to_be_bytes() {
            Some(syndrome::LOCAL_QP_OP)
        } else if segs.clone().any(|(len, lkey, addr)| {
            room += u64::from(len);
            self.mr_range(lkey, addr, u64::from(len)).is_none()
        }) {
            Some(syndrome::LOCAL_PROT)
        } else if buf.len() as u64 > room {
            Some(syndrome::LOCAL_LENGTH)
        } else {
            None
        };
        let len = buf.len();
        if failure.is_none() {
            let mut rest = &buf[..];
            for (seg_len, _, addr) in segs {
                if rest.is_empty() {
                    break;
                }
                let n = rest.len().min(seg_len as usize);
                // `[addr, addr + seg_len)` lies in a live MR (checked above) and belongs to the
                // device from the RQ doorbell to the CQE; `buf` is the model's own vector.
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(rest.as_ptr(), addr as *mut u8, n) };
                if let Some(t) = self.trace.as_mut() {
                    t.rxd(wq, addr, n);
                }
                rest = &rest[n..];
            }
        }
        self.delivered = buf;
        match failure {
            Some(synd) => self.rx_failed(port, wq, cqn, counter, synd),
            None => self.rx_done(port, wq, cqn, counter, len, hash, flags, vlan),
        }
    }

    /// A receive WQE that failed with `synd`: its error CQE; the errors the PRM calls fatal to
    /// the queue (a bad lkey, protection, flush) put the RQ in the error state.
    pub(super) fn rx_failed(&mut self, port: usize, wq: u32, cqn: u32, counter: u16, synd: u8) {
        self.rx_failed_with(port, wq, cqn, counter, synd, 0);
    }

    /// [`Device::rx_failed`] with `byte_cnt` (at 0x2c, where a plain CQE has it) in the error
    /// CQE.
    pub(super) fn rx_failed_with(&mut self, port: usize, wq: u32, cqn: u32, counter: u16, synd: u8, byte_cnt: u32) {
        if matches!(synd, syndrome::LOCAL_QP_OP | syndrome::LOCAL_PROT | syndrome::WR_FLUSH) {
            self.rqs[wq.wrapping_sub(WQN_BASE) as usize]
                .as_mut()
                .expect("live")
                .error = true;
        }
        self.ports[port].counters.rx_error_cqes += 1;
        let mut err = *ErrCqe::resp_err(synd, counter, wq).as_bytes();
        err[0x2c..0x30].copy_from_slice(&byte_cnt.to_be_bytes());
        self.write_cqe(cqn, &err);
    }

    /// A frame of `len` bytes received into WQE `counter` of `wq`: counters, and its CQE.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn rx_done(&mut self, port: usize, wq: u32, cqn: u32, counter: u16, len: usize, hash: u32, flags: u16, vlan: u16) {
        let drops = std::mem::take(
            &mut self.rqs[wq.wrapping_sub(WQN_BASE) as usize]
                .as_mut()
                .expect("live")
                .pending_drops,
        );
        let c = &mut self.ports[port].counters;
        c.rx_frames += 1;
        c.rx_bytes += len as u64;
        let now = self.now_stamp();
        let mut cqe = Cqe64::resp_send(counter, len as u32, hash, flags, now, drops);
        cqe.vlan_info = Be16::new(vlan);
        // CQE v1 names the receiving queue by its user index in `srqn_uidx[23:0]` (rdma-core
        // `cq.c` looks the WQ up by it); the model's user index is the WQ number.
        cqe.srqn_uidx = Be32::new(wq & 0x00ff_ffff);
        self.write_cqe(cqn, cqe.as_bytes());
    }

    /// Writes a CQE at the CQ's producer index with that pass's owner bit, `op_own` last (drivers
    /// read the owner byte, fence, then the rest, so the device must publish it after the rest),
    /// after an optional overrun check against the published consumer index.
    ///
    /// On a CQ created with compression, a plain receive completion is held instead, to be written
    /// with the others of the step as compressed sessions ([`Device::flush_held`]), or as soon as
    /// a session's worth ([`CQE_COMP_MAX_NUM`]) is held; anything else
    /// (an error CQE, an injected one) first writes what is held, so a session never spans it.
    pub(super) fn write_cqe(&mut self, cqn: u32, cqe: &[u8; 64]) -> bool {
        if let Some(cq) = cq_of(&mut self.cqs, cqn) {
            if cq.comp.is_some() {
                let c = Cqe64::from_bytes(cqe);
                if c.op_own & 0xfc == mlx5_prm::CQE_RESP_SEND << 4 {
                    cq.held.push(c);
                    // A full session goes out at once: holding more would only delay the
                    // driver's view of them (and its refill) while the step goes on.
                    if cq.held.len() >= CQE_COMP_MAX_NUM as usize {
                        self.flush_cq(cqn);
                    }
                    return true;
                }
                self.flush_cq(cqn);
            }
        }
        self.write_slot(cqn, cqe)
    }

    /// Writes every CQ's held receive completions (end of a step, a WQ reset, a test's injection).
    pub(super) fn flush_held(&mut self) {
        for i in 0..self.cqs.len() {
            if self.cqs[i].as_ref().is_some_and(|c| !c.held.is_empty()) {
                self.flush_cq(CQN_BASE + i as u32);
            }
        }
    }

    /// The `zip=irregular` knob's next number (xorshift64*).
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32
    }

    /// Writes CQ `cqn`'s held completions in order: each run of two or more that may share a
    /// title ([`session_member`]) as a compressed session of at most [`CQE_COMP_MAX_NUM`], the
    /// rest as plain CQEs.
    ///
    /// A session ends at the end of the CQ buffer: it never wraps to slot 0. DPDK's vectorized
    /// receive path, its default with compression on a ConnectX-5, reads a session's mini-CQE
    /// arrays at `cq + pos` and stamps its slots `cq[inv]` with no ring mask, from a title at
    /// any slot (drivers/net/mlx5/mlx5_rxtx_vec_sse.h `rxq_cq_decompress_v`; `rxq_burst_v` in
    /// mlx5_rxtx_vec.c keeps only its own batch from crossing the end), and takes the session's
    /// mbufs from consecutive entries of its ring, so a session that wrapped would be read past
    /// both rings' ends. That it runs on ConnectX cards says the device does not write one.
    /// (The kernel's and rdma-core's readers mask every index and would read either.)
    fn flush_cq(&mut self, cqn: u32) {
        let Some(cq) = cq_of(&mut self.cqs, cqn) else {
            return;
        };
        let (held, fmt) = (
            std::mem::take(&mut cq.held),
            cq.comp.expect("only compressing CQs hold"),
        );
        let mut i = 0;
        while i < held.len() {
            let Some(cq) = cq_of(&mut self.cqs, cqn) else {
                break;
            };
            let to_end = (cq.cqe_cnt - (cq.pi & (cq.cqe_cnt - 1))) as usize;
            // The longest session the knob lets start here: `max_num`, a random length (a
            // device compressing what it has when it has it: sessions of any length, starting
            // anywhere, so a driver meets short and odd ones), or 1 (no compression).
            let longest = match self.cfg.knobs.zip {
                Zip::Regular => CQE_COMP_MAX_NUM as usize,
                Zip::Never => 1,
                Zip::Irregular(_) => 1 + (self.next_random() % u64::from(CQE_COMP_MAX_NUM)) as usize,
            };
            let mut n = 1;
            while i + n < held.len() && n < longest.min(to_end) && session_member(&held[i], &held[i + n], n as u16, fmt)
            {
                n += 1;
            }
            if n == 1 || !self.write_session(cqn, &held[i..i + n], fmt) {
                for c in &held[i..i + n] {
                    self.write_slot(cqn, c.as_bytes());
                }
            }
            i += n;
        }
        // The buffer goes back for the next step (no allocation per step).
        if let Some(cq) = cq_of(&mut self.cqs, cqn) {
            let mut held = held;
            held.clear();
            cq.held = held;
        }
    }

    /// A compressed session of the basic layout (reference §3.11-3.12; DPDK `mlx5_rx_poll_len` and
    /// `rxq_cq_decompress_v` read it, Linux `mlx5e_decompress_cqes_start`): the title, the first
    /// completion with `op_own` format 3 and `byte_cnt` = the number of packets, at the producer
    /// index `h`; the mini-CQEs (byte count and hash or checksum/stride index of each packet) eight
    /// to a slot at `h + 1`, `h + 8`, `h + 16`, ... (wrapping the ring); the other slots of the
    /// session not written at all. The session takes one slot per packet, so the producer index
    /// moves by `n`. The arrays are written first and the title's `op_own` last, with release:
    /// a driver that sees the title sees its arrays. Returns false (nothing written) when the
    /// strict overrun check finds fewer than `n` free slots; the caller then writes them one by
    /// one, and the overrun is counted there.
    fn write_session(&mut self, cqn: u32, run: &[Cqe64], fmt: MiniFormat) -> bool {
        let Some(cq) = cq_of(&mut self.cqs, cqn) else {
            return false;
        };
        let n = run.len() as u32;
        if cq.error {
            return false;
        }
        if self.cfg.strict_cq {
            // SAFETY: the record word belongs to this live CQ.
            let ci = unsafe { dma::load_dbrec(cq.mem.dbrec()) };
            cq.ci_seen = ci;
            if let Some(t) = self.trace.as_mut() {
                t.cqci(cqn, ci);
            }
            if cq.used(cq.pi.wrapping_add(n - 1), ci) >= cq.cqe_cnt {
                return false;
            }
        }
        let h = cq.pi;
        for (j, chunk) in run.chunks(MINI_CQES_PER_SLOT as usize).enumerate() {
            let mut bytes = [0u8; 64];
            for (k, c) in chunk.iter().enumerate() {
                let m = match fmt {
                    MiniFormat::Hash => MiniCqe::hash(c.rx_hash_res.get(), c.byte_cnt.get()),
                    MiniFormat::Csum => MiniCqe::csum(c.csum.get(), 0, c.byte_cnt.get()),
                    MiniFormat::CsumStridx => MiniCqe::csum(c.csum.get(), c.wqe_counter.get(), c.byte_cnt.get()),
                };
                bytes[k * 8..k * 8 + 4].copy_from_slice(&m.w0.get().to_be_bytes());
                bytes[k * 8 + 4..k * 8 + 8].copy_from_slice(&m.byte_cnt.get().to_be_bytes());
            }
            let at = h.wrapping_add(mini_array_slot(j as u32)) & (cq.cqe_cnt - 1);
            // Only the mini-CQEs the session has: the rest of a last, partial array is not written
            // (the slot keeps its old bytes, as the holes of the session do).
            let len = chunk.len() * 8;
            // SAFETY: the slot is inside the CQ ring and, by the check above (or the driver's
            // sizing), consumed by the driver.
            unsafe { dma::write_bytes(cq.mem.ring().wrapping_add(at as usize * 64), &bytes[..len]) };
            if let Some(t) = self.trace.as_mut() {
                let name = match fmt {
                    MiniFormat::Hash => "hash",
                    MiniFormat::Csum => "csum",
                    MiniFormat::CsumStridx => "csum_stridx",
                };
                t.mini(cqn, h.wrapping_add(mini_array_slot(j as u32)), name, &bytes[..len]);
            }
        }
        let mut title = run[0];
        title.make_title(n);
        let mut bytes = *title.as_bytes();
        bytes[63] = (bytes[63] & !1) | mlx5_prm::cqe_owner_for(h, cq.log2);
        let slot = cq.mem.ring().wrapping_add(((h & (cq.cqe_cnt - 1)) as usize) * 64);
        // SAFETY: as above; `op_own` goes last, with release.
        unsafe { dma::write_cqe(slot, &bytes) };
        cq.pi = h.wrapping_add(n);
        self.counters.cqes += u64::from(n);
        self.counters.cqe_sessions += 1;
        self.counters.cqe_session_packets += u64::from(n);
        if let Some(t) = self.trace.as_mut() {
            t.cqe_title(cqn, h, &bytes, n);
        }
        true
    }

    /// Writes one CQE at the CQ's producer index (the plain path of [`Device::write_cqe`]).
    fn write_slot(&mut self, cqn: u32, cqe: &[u8; 64]) -> bool {
        let Some(cq) = cq_of(&mut self.cqs, cqn) else {
            return false;
        };
        if cq.error {
            // A CQ in error writes nothing (`cq_overrun=error`, `DeviceEvent::CqError`).
            return false;
        }
        if self.cfg.strict_cq && cq.used(cq.pi, cq.ci_seen) >= cq.cqe_cnt {
            // SAFETY: the record word belongs to this live CQ.
            let ci = unsafe { dma::load_dbrec(cq.mem.dbrec()) };
            cq.ci_seen = ci;
            if let Some(t) = self.trace.as_mut() {
                t.cqci(cqn, ci);
            }
            if cq.used(cq.pi, ci) >= cq.cqe_cnt {
                let pi = cq.pi;
                self.counters.cq_overruns += 1;
                self.trace_event(format_args!("CQ-OVERRUN cqn={cqn:#x} pi={pi} ci={ci}"));
                if self.cfg.knobs.cq_overrun == CqOverrun::Error {
                    // The CQ enters the error state and says so (kernel `cq.c`
                    // `mlx5_ib_cq_event`: `IBV_EVENT_CQ_ERR`).
                    self.raise(DeviceEvent::CqError { cqn });
                }
                return false;
            }
        }
        let mut bytes = *cqe;
        bytes[63] = (bytes[63] & !1) | mlx5_prm::cqe_owner_for(cq.pi, cq.log2);
        let slot = cq.mem.ring().wrapping_add(((cq.pi & (cq.cqe_cnt - 1)) as usize) * 64);
        // SAFETY: the slot is inside the CQ ring; the overrun check (or the driver's sizing)
        // guarantees the driver has consumed it.
        unsafe { dma::write_cqe(slot, &bytes) };
        let pi = cq.pi;
        cq.pi = cq.pi.wrapping_add(1);
        self.counters.cqes += 1;
        if let Some(t) = self.trace.as_mut() {
            t.cqe(cqn, pi, &bytes);
        }
        true
    }

    /// Removes and returns the first pending fault of `port` that `pick` accepts.
    pub(super) fn take_fault(&mut self, port: usize, pick: impl Fn(&Fault) -> bool) -> Option<Fault> {
        let faults = &mut self.ports.get_mut(port)?.faults;
        let at = faults.iter().position(pick)?;
        faults.remove(at)
    }

    pub(super) fn trace_event(&mut self, args: std::fmt::Arguments<'_>) {
        if let Some(t) = self.trace.as_mut() {
            t.event(args);
        }
    }
}

/// The live CQ `cqn` among `cqs` (a function of the field alone, so that the rest of the
/// device stays borrowable).
pub(super) fn cq_of(cqs: &mut [Option<super::CqObj>], cqn: u32) -> Option<&mut super::CqObj> {
    cqs.get_mut(cqn.wrapping_sub(CQN_BASE) as usize)
        .and_then(Option::as_mut)
}

/// Whether `c` may be packet `i` of a session titled by `t`: a plain receive completion equal to
/// the title in every field a mini-CQE does not carry (drivers copy the title's flags, VLAN, hash
/// type, user index and drop count to every packet: Linux `mlx5e_decompress_cqe`, DPDK
/// `rxq_cq_decompress_v`), with the WQE counter `t`'s + `i` on a cyclic RQ (the driver derives it,
/// reference §3.11) or, with stride indices in the minis, the same WQE (`wqe_id`). The timestamp
/// is the title's for all, as mini-CQEs carry none (which is why DPDK turns compression off when
/// timestamps are asked for). A striding RQ's filler CQE (`byte_cnt` bit 31) is never compressed
/// (reference §9 trap 15). A stripped tag is among the compared fields, `vlan_info` and the
/// VLAN-stripped bit of `hdr_type_etc` alike: no mini format but L34H carries either, and drivers
/// hand up the title's for every mini-CQE (DPDK `mlx5_rx.c` `rxq_cq_to_mbuf` reads
/// `cqe->vlan_info` and `MLX5_CQE_VLAN_STRIPPED` from the title unless the format is
/// `L34H_STRIDX`), so frames of different tags, or tagged and untagged ones, never share a session.
fn session_member(t: &Cqe64, c: &Cqe64, i: u16, fmt: MiniFormat) -> bool {
    const FILLER: u32 = 1 << 31;
    if c.byte_cnt.get() & FILLER != 0 || t.byte_cnt.get() & FILLER != 0 {
        return false;
    }
    let mut a = *c;
    a.byte_cnt = t.byte_cnt;
    a.timestamp = t.timestamp;
    match fmt {
        MiniFormat::Hash => {
            a.rx_hash_res = t.rx_hash_res;
            if c.wqe_counter.get() != t.wqe_counter.get().wrapping_add(i) {
                return false;
            }
            a.wqe_counter = t.wqe_counter;
        }
        MiniFormat::Csum => {
            a.csum = t.csum;
            if c.wqe_counter.get() != t.wqe_counter.get().wrapping_add(i) {
                return false;
            }
            a.wqe_counter = t.wqe_counter;
        }
        MiniFormat::CsumStridx => {
            a.csum = t.csum;
            a.wqe_counter = t.wqe_counter;
        }
    }
    a == *t
}

/// The RSS input of a TIR hashing the `IBV_RX_HASH_*` fields in `fields` (verbs.h
/// `enum ibv_rx_hash_fields`): the selected addresses of the frame's IP version, then the
/// selected ports of its L4 protocol, in that order (the Toeplitz input order of `rss_input`).
/// A frame without the selected fields hashes to 0 (the first entry of the table).
pub(super) fn rss_input_fields(frame: &[u8], p: &pkt::Parsed, fields: u64, out: &mut [u8; 36]) -> usize {
    use rdma_abi::{
        IBV_RX_HASH_DST_IPV4, IBV_RX_HASH_DST_IPV6, IBV_RX_HASH_DST_PORT_TCP, IBV_RX_HASH_DST_PORT_UDP,
        IBV_RX_HASH_SRC_IPV4, IBV_RX_HASH_SRC_IPV6, IBV_RX_HASH_SRC_PORT_TCP, IBV_RX_HASH_SRC_PORT_UDP,
    };
    const SRC_IPV4: u64 = IBV_RX_HASH_SRC_IPV4 as u64;
    const DST_IPV4: u64 = IBV_RX_HASH_DST_IPV4 as u64;
    const SRC_IPV6: u64 = IBV_RX_HASH_SRC_IPV6 as u64;
    const DST_IPV6: u64 = IBV_RX_HASH_DST_IPV6 as u64;
    const SRC_PORT_TCP: u64 = IBV_RX_HASH_SRC_PORT_TCP as u64;
    const DST_PORT_TCP: u64 = IBV_RX_HASH_DST_PORT_TCP as u64;
    const SRC_PORT_UDP: u64 = IBV_RX_HASH_SRC_PORT_UDP as u64;
    const DST_PORT_UDP: u64 = IBV_RX_HASH_DST_PORT_UDP as u64;
    let mut n = 0;
    let mut put = |b: &[u8], n: &mut usize| {
        out[*n..*n + b.len()].copy_from_slice(b);
        *n += b.len();
    };
    match p.l3 {
        pkt::L3::Ipv4 { off, .. } => {
            if fields & SRC_IPV4 != 0 {
                put(&frame[off + 12..off + 16], &mut n);
            }
            if fields & DST_IPV4 != 0 {
                put(&frame[off + 16..off + 20], &mut n);
            }
        }
        pkt::L3::Ipv6 { off, .. } => {
            if fields & SRC_IPV6 != 0 {
                put(&frame[off + 8..off + 24], &mut n);
            }
            if fields & DST_IPV6 != 0 {
                put(&frame[off + 24..off + 40], &mut n);
            }
        }
        pkt::L3::None => return 0,
    }
    let (l4, src, dst) = match p.l4 {
        pkt::L4::Tcp { off, .. } => (Some(off), SRC_PORT_TCP, DST_PORT_TCP),
        pkt::L4::Udp { off } => (Some(off), SRC_PORT_UDP, DST_PORT_UDP),
        pkt::L4::None => (None, 0, 0),
    };
    if let Some(off) = l4 {
        if fields & src != 0 {
            put(&frame[off..off + 2], &mut n);
        }
        if fields & dst != 0 {
            put(&frame[off + 2..off + 4], &mut n);
        }
    }
    n
}

fn ctrl_of(wqe: &[u8]) -> CtrlSeg {
    let w = |o: usize| u32::from_be_bytes(wqe[o..o + 4].try_into().expect("4 bytes"));
    CtrlSeg {
        opmod_idx_opcode: Be32::new(w(0)),
        qpn_ds: Be32::new(w(4)),
        signature: wqe[8],
        dci_stream_channel_id: [wqe[9], wqe[10]],
        fm_ce_se: wqe[11],
        imm: u32::from_ne_bytes(wqe[12..16].try_into().expect("4 bytes")),
    }
}

/// The CQE flags word the NIC's parser reports (BE16 at 0x1c, rdma-core `hds_ip_ext` and
/// `l4_hdr_type_etc`; l4 types from Linux `device.h`; layout in `docs/mlx5-notes.md`).
/// L2_OK stays clear: no source read says when the hardware sets it, the golden RX CQE
/// (`g1_cqe_rx_ipv4_udp` in `mlx5_prm::vectors`) leaves it 0, and no driver we follow
/// reads it.
pub fn hdr_type_etc(frame: &[u8], p: &pkt::Parsed) -> u16 {
    let mut f = 0;
    match p.l3 {
        pkt::L3::Ipv4 { frag, options, .. } => {
            f |= cqe_flags::L3_IPV4 << cqe_flags::L3_TYPE_SHIFT;
            if pkt::ipv4_header_ok(frame, p) {
                f |= cqe_flags::L3_OK;
            }
            if frag {
                f |= cqe_flags::IP_FRAG;
            }
            if options {
                f |= cqe_flags::IP_EXT_OPTS;
            }
        }
        pkt::L3::Ipv6 { ext, .. } => {
            f |= cqe_flags::L3_IPV6 << cqe_flags::L3_TYPE_SHIFT | cqe_flags::L3_OK;
            if ext {
                f |= cqe_flags::IP_EXT_OPTS;
            }
        }
        pkt::L3::None => {}
    }
    let l4 = match p.l4 {
        pkt::L4::Udp { .. } => cqe_flags::L4_UDP,
        pkt::L4::Tcp {
            flags, payload_empty, ..
        } => {
            if flags & 0x10 == 0 {
                cqe_flags::L4_TCP
            } else if payload_empty {
                cqe_flags::L4_TCP_EMPTY_ACK
            } else {
                cqe_flags::L4_TCP_ACK
            }
        }
        pkt::L4::None => cqe_flags::L4_NONE,
    };
    f |= l4 << cqe_flags::L4_TYPE_SHIFT;
    if l4 != cqe_flags::L4_NONE && pkt::l4_checksum_ok(frame, p) {
        f |= cqe_flags::L4_OK;
    }
    f
}

/// A data segment's byte count, lkey and address (`struct mlx5_wqe_data_seg`, big-endian).
pub(super) fn data_seg(seg: &[u8; 16]) -> (u32, u32, u64) {
    (
        u32::from_be_bytes(seg[0..4].try_into().expect("4")),
        u32::from_be_bytes(seg[4..8].try_into().expect("4")),
        u64::from_be_bytes(seg[8..16].try_into().expect("8")),
    )
}

/// The Ethernet FCS of `frame`: CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, initial
/// and final value all ones), sent least significant byte first.
fn fcs32(frame: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    !frame
        .iter()
        .fold(!0u32, |c, &b| TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx5_prm::vectors as golden;

    /// A compressing CQ: receive completions of a step go out as sessions (the second one with
    /// the other WQ's user index starts a new session), an error CQE ends the session before it
    /// and is never compressed, send completions are never held or compressed, and a session
    /// whose next WQE counter does not follow is split.
    #[test]
    fn sessions_end_at_errors_and_differences_and_never_take_send_completions() {
        use mlx5_prm::{mini_array_from, MiniFormat};
        let nic = super::super::Nic::pair(super::super::ModelConfig::default()).unwrap();
        let q = nic.alloc_cq_with(63, Some(MiniFormat::Hash)).unwrap();
        let cqn = q.raw.num;
        let rx = |counter: u16, len: u32, uidx: u32| {
            let mut c = Cqe64::resp_send(counter, len, 0x1000 + u32::from(counter), 0x0628, 0, 0);
            c.srqn_uidx = Be32::new(uidx);
            c
        };
        let slot = |i: u32| Cqe64::from_bytes(&nic.cq_slot(cqn, i).unwrap());
        {
            let mut d = nic.dev();
            for i in 0..3 {
                assert!(d.write_cqe(cqn, rx(i, 60 + u32::from(i), 5).as_bytes()));
            }
        }
        // Held until the step ends or something else is written.
        assert_eq!(slot(0).op_own, mlx5_prm::CQE_INIT_OP_OWN);
        {
            let mut d = nic.dev();
            d.write_cqe(cqn, ErrCqe::resp_err(syndrome::LOCAL_LENGTH, 3, 5).as_bytes());
            for i in 4..6 {
                d.write_cqe(cqn, rx(i, 60, 5).as_bytes());
            }
            d.write_cqe(cqn, rx(6, 60, 6).as_bytes()); // another user index
            d.write_cqe(cqn, rx(8, 60, 6).as_bytes()); // counter does not follow
            d.write_cqe(cqn, Cqe64::req(9, 0x42, 0).as_bytes());
            d.write_cqe(cqn, rx(10, 60, 5).as_bytes());
            d.flush_held();
        }
        // Session of 3 at 0 (array at 1), the error at 3, session of 2 at 4 (array at 5), plain
        // CQEs at 6 and 7, the send completion at 8, a plain CQE at 9.
        let t = slot(0);
        assert!(t.is_title());
        assert_eq!((t.mini_cqe_count(), t.wqe_counter.get(), t.owner()), (3, 0, 0));
        let a = mini_array_from(&nic.cq_slot(cqn, 1).unwrap());
        assert_eq!(
            a[..3]
                .iter()
                .map(|m| (m.rx_hash(), m.byte_cnt.get()))
                .collect::<Vec<_>>(),
            [(0x1000, 60), (0x1001, 61), (0x1002, 62)]
        );
        assert_eq!(slot(2).op_own, mlx5_prm::CQE_INIT_OP_OWN, "a hole is not written");
        assert_eq!(slot(3).opcode(), mlx5_prm::CQE_RESP_ERR);
        assert_eq!(
            (slot(4).is_title(), slot(4).mini_cqe_count(), slot(4).wqe_counter.get()),
            (true, 2, 4)
        );
        for (i, counter) in [(6, 6), (7, 8), (9, 10)] {
            let c = slot(i);
            assert_eq!(
                (c.op_own, c.wqe_counter.get()),
                (mlx5_prm::CQE_RESP_SEND << 4, counter),
                "slot {i}"
            );
        }
        assert_eq!(slot(8).opcode(), mlx5_prm::CQE_REQ);
        let c = nic.counters();
        assert_eq!((c.cqe_sessions, c.cqe_session_packets, c.cqes), (2, 5, 10));
    }

    /// Completions that differ only in what a mini-CQE carries (length, hash) and the timestamp
    /// share a session; a different stripped tag, or stripped against not stripped, does not
    /// (the driver would hand up the title's tag for both).
    #[test]
    fn a_session_shares_its_titles_vlan_tag() {
        let strip = cqe_flags::VLAN_STRIPPED;
        let tagged = |counter: u16, len: u32, tci: u16, flags: u16| {
            let mut c = Cqe64::resp_send(counter, len, u32::from(counter) * 7, flags, u64::from(counter), 0);
            c.vlan_info = Be16::new(tci);
            c
        };
        let t = tagged(10, 60, 0x0123, strip);
        assert!(session_member(
            &t,
            &tagged(11, 9000, 0x0123, strip),
            1,
            MiniFormat::Hash
        ));
        assert!(!session_member(&t, &tagged(11, 60, 0x0124, strip), 1, MiniFormat::Hash));
        assert!(!session_member(&t, &tagged(11, 60, 0, 0), 1, MiniFormat::Hash));
        assert!(!session_member(
            &tagged(10, 60, 0, 0),
            &tagged(11, 60, 0x0123, strip),
            1,
            MiniFormat::Hash
        ));
        assert!(
            !session_member(&t, &tagged(12, 60, 0x0123, strip), 1, MiniFormat::Hash),
            "WQE order"
        );
    }

    /// The CRC-32 check value of IEEE 802.3 (and zlib): "123456789" gives 0xCBF43926.
    #[test]
    fn the_fcs_is_ieee_crc32() {
        assert_eq!(fcs32(b"123456789"), 0xcbf4_3926);
        assert_eq!(fcs32(b""), 0);
    }

    #[test]
    fn parser_flags_for_the_reference_frame_are_those_of_g1() {
        let frame = golden::bytes("frame_ipv4_udp_60");
        let g1 = Cqe64::from_bytes(&golden::bytes("g1_cqe_rx_ipv4_udp").try_into().unwrap());
        assert_eq!(hdr_type_etc(&frame, &pkt::parse(&frame)), g1.hdr_type_etc.get());
    }
}
