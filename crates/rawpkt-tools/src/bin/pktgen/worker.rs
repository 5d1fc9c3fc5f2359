//! The pinned loops: transmit cores and the receiver. They share nothing with the reporting
//! thread but a few atomics, published every few hundred bursts; the per-burst path neither
//! allocates nor locks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rawpkt::{Burst, Pool, PoolConfig, Port, QueueConfig, TxQueue};

use crate::fail::Fail;
use crate::pace::{Clock, Fair, SendCost, Step, LATE_NS, RX_SLACK_NS};
use crate::seq::SeqTracker;
use crate::stream::{Pacer, Stream};
use crate::template::{stamp, Plain};
use crate::traffic::{read_stamp, Held, Traffic};

/// Totals a worker publishes for the reporter.
#[derive(Default)]
pub(crate) struct Counters {
    /// Nanoseconds this worker spent sending (its start to its last burst).
    pub active_ns: AtomicU64,
    /// The CPU a transmit core ran on, plus one; 0: unpinned (wherever the kernel put it).
    pub cpu: AtomicU64,
    pub packets: AtomicU64,
    pub bytes: AtomicU64,
    pub drops: AtomicU64,
    pub errors: AtomicU64,
}

impl Counters {
    fn publish(&self, packets: u64, bytes: u64, drops: u64, errors: u64) {
        self.packets.store(packets, Ordering::Release);
        self.bytes.store(bytes, Ordering::Release);
        self.drops.store(drops, Ordering::Release);
        self.errors.store(errors, Ordering::Release);
    }

    pub(crate) fn snapshot(&self) -> [u64; 4] {
        [&self.packets, &self.bytes, &self.drops, &self.errors].map(|a| a.load(Ordering::Acquire))
    }
}

/// Per-stream totals: sent per core (each slot written by its core only), received, and the
/// receiver's latency figures, published as the port counters are.
pub(crate) struct StreamCounters {
    /// Packets and bytes, one pair per transmit core.
    pub tx: Vec<[AtomicU64; 2]>,
    /// Packets the stream's rate asked of each transmit core by the time of its count in `tx`
    /// (`Pacer::owed`; 0 without a rate): a stream that falls short of its rate made fewer.
    pub owed: Vec<AtomicU64>,
    pub rx_packets: AtomicU64,
    pub rx_bytes: AtomicU64,
    /// Sum and number of latency samples so far, for a mean over any interval.
    pub lat_sum_ns: AtomicU64,
    pub lat_samples: AtomicU64,
    /// Largest latency since the reporter last took it (it swaps in 0).
    pub lat_max_ns: AtomicU64,
    /// RFC 3550 interarrival jitter, ns.
    pub jitter_ns: AtomicU64,
    /// From the sequence numbers (`seq`), so far: frames received again, received after a
    /// higher number of their core, and known lost (a number the window has passed).
    pub duplicates: AtomicU64,
    pub out_of_order: AtomicU64,
    pub lost: AtomicU64,
    /// Latency quantiles over the run so far, refreshed every few thousand receive bursts
    /// (for the metrics endpoint).
    pub lat_p50_ns: AtomicU64,
    pub lat_p99_ns: AtomicU64,
    pub lat_p999_ns: AtomicU64,
    /// Whether the receiver records the gaps between the stream's send stamps (its
    /// inter-departure times): for shaped streams, where they are the point.
    pub gaps: bool,
}

impl StreamCounters {
    pub(crate) fn new(cores: usize, gaps: bool) -> StreamCounters {
        StreamCounters {
            gaps,
            tx: (0..cores).map(|_| [AtomicU64::new(0), AtomicU64::new(0)]).collect(),
            owed: (0..cores).map(|_| AtomicU64::new(0)).collect(),
            rx_packets: AtomicU64::new(0),
            rx_bytes: AtomicU64::new(0),
            lat_sum_ns: AtomicU64::new(0),
            lat_samples: AtomicU64::new(0),
            lat_max_ns: AtomicU64::new(0),
            jitter_ns: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            out_of_order: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            lat_p50_ns: AtomicU64::new(0),
            lat_p99_ns: AtomicU64::new(0),
            lat_p999_ns: AtomicU64::new(0),
        }
    }

    /// Packets and bytes sent (made, and handed to a queue or about to be), over all cores.
    pub(crate) fn tx_total(&self) -> [u64; 2] {
        self.tx.iter().fold([0, 0], |a, c| {
            [a[0] + c[0].load(Ordering::Acquire), a[1] + c[1].load(Ordering::Acquire)]
        })
    }

    /// Packets the rate asked of all cores together (see `owed`).
    pub(crate) fn owed_total(&self) -> u64 {
        self.owed.iter().map(|o| o.load(Ordering::Acquire)).sum()
    }

    /// Packets sent and asked for since `last` (the two then; updated to now; `[0, 0]` for
    /// the whole run), and whether the stream fell short of its rate meanwhile (`pace::short`,
    /// allowing a packet or two per core: a stream on time lags its rate by the packet due
    /// since its last burst). Asked is read first: it is published with a sent count, which
    /// only grows after it.
    pub(crate) fn short_since(&self, last: &mut [u64; 2]) -> (u64, u64, bool) {
        let owed = self.owed_total();
        let sent = self.tx_total()[0];
        let (ds, d_owed) = (sent.saturating_sub(last[0]), owed.saturating_sub(last[1]));
        *last = [sent, owed];
        (ds, d_owed, crate::pace::short(ds, d_owed, 2 * self.tx.len() as u64))
    }

    pub(crate) fn rx_total(&self) -> [u64; 2] {
        [
            self.rx_packets.load(Ordering::Acquire),
            self.rx_bytes.load(Ordering::Acquire),
        ]
    }

    /// Cores that number this stream's frames, each `k * cores + core`: the stride of its
    /// sequence numbers.
    pub(crate) fn cores(&self) -> usize {
        self.tx.len()
    }

    /// Sent and neither received nor known lost: frames on their way, and numbers missing that
    /// may still come (overtaken). Read after the received counts, as the reporter reads them.
    pub(crate) fn in_flight(&self, tx: u64, rx: u64) -> u64 {
        let dups = self.duplicates.load(Ordering::Acquire);
        let lost = self.lost.load(Ordering::Acquire);
        tx.saturating_sub(rx.saturating_sub(dups)).saturating_sub(lost)
    }
}

/// What one transmit core does.
pub(crate) struct TxPlan {
    pub core: usize,
    pub cores: usize,
    pub cpu: Option<usize>,
    pub queues: u16,
    pub burst: usize,
    pub deadline: Option<Instant>,
    pub per_stream: Arc<Vec<StreamCounters>>,
    /// Stamp with the port's device clock (`Port::device_clock_ns`), not the run's.
    pub hw_clock: bool,
    /// The send queue of the latency stream (first core): its own, or None where the port has
    /// no queue left beyond the load's (`Port::tx_queues`), and it shares the core's first.
    pub latency_queue: Option<u16>,
    /// Set once the receive queues exist: no core sends before (a frame steered to a queue
    /// with no socket yet is lost). The first core sets it when it runs the receiver itself.
    pub rx_ready: Arc<AtomicBool>,
    /// Live control: each stream's settings (`--control`), or none.
    pub controls: Vec<Arc<crate::control::StreamControl>>,
}

const PUBLISH_EVERY: u32 = 256;
/// Packets a receive burst takes at most.
const RX_BURST: usize = 256;
/// Packets a receive burst takes at most in the waits of a loop that paces per departure: a
/// poll starts only with `RX_SLACK_NS` to go and must end within it. Measured per departure
/// (model pair, SCHED_FIFO, load 4-7): 32 frames took 1.8-5 µs and made ~2,500 departures a
/// second late by 2.5 µs; 8 take about 0.6 µs, and the wait polls again while slack is left.
const RX_BURST_BETWEEN_DEPARTURES: usize = 8;
/// A send time no frame carries (they count nanoseconds from the start).
const NO_STAMP: u64 = u64::MAX;

fn totals<'a>(qs: impl Iterator<Item = &'a rawpkt::QueueStats>) -> (u64, u64, u64, u64) {
    qs.fold((0, 0, 0, 0), |(p, b, d, e), s| {
        (p + s.packets, b + s.bytes, d + s.drops, e + s.errors.total())
    })
}

/// A histogram of times in ns, 1 ns to a minute, three significant digits: latencies, gaps
/// between departures, lateness.
fn time_hist() -> Result<Histogram<u64>, Fail> {
    Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| Fail::Runtime(e.to_string()))
}

/// What a transmit core saw of one stream's departures, when they have due times (Poisson,
/// timed replay): how late each left, and the gaps between consecutive departures that both
/// left on time.
pub(crate) struct Departed {
    pub stream: usize,
    pub departures: u64,
    pub late: u64,
    /// Departures that left before their due time, with a send made less than half a send's
    /// cost before it (`SendCost`), and the most any left early, ns.
    pub early: u64,
    pub early_max: u64,
    /// Send stamp minus due time of every departure, ns (the loop's clock; 0 for an early one).
    pub lateness: Histogram<u64>,
    /// Gaps between consecutive departures of this core that both left within `LATE_NS` of
    /// their due times, ns.
    pub on_time_gaps: Histogram<u64>,
    /// The last departure's time (ns from the start) and whether it was on time.
    last: Option<(u64, bool)>,
}

impl Departed {
    fn new(stream: usize) -> Result<Departed, Fail> {
        Ok(Departed {
            stream,
            departures: 0,
            late: 0,
            early: 0,
            early_max: 0,
            lateness: time_hist()?,
            on_time_gaps: time_hist()?,
            last: None,
        })
    }

    /// One departure, due at `due` and sent at `at` (ns from the start; `at` may be before `due`
    /// when it joined the send of the one before): departures of one core come in the order
    /// they were due, and at times that do not go back.
    #[inline]
    fn record(&mut self, due: u64, at: u64) {
        let lateness = at.saturating_sub(due);
        let on_time = lateness <= LATE_NS;
        self.departures += 1;
        self.late += u64::from(!on_time);
        if at < due {
            self.early += 1;
            self.early_max = self.early_max.max(due - at);
        }
        self.lateness.saturating_record(lateness);
        if let Some((last, true)) = self.last {
            if on_time {
                self.on_time_gaps.saturating_record(at - last);
            }
        }
        self.last = Some((at, on_time));
    }

    /// Adds another core's record of the same stream.
    pub(crate) fn add(&mut self, o: &Departed) {
        self.departures += o.departures;
        self.late += o.late;
        self.early += o.early;
        self.early_max = self.early_max.max(o.early_max);
        // Histograms of the same bounds (`time_hist`) always add.
        let _ = self.lateness.add(&o.lateness);
        let _ = self.on_time_gaps.add(&o.on_time_gaps);
    }
}

/// One stream as a transmit core sends it.
struct Lane {
    stream: usize,
    pacer: Pacer,
    cursor: crate::traffic::Cursor,
    bytes: u64,
    fixed_len: Option<usize>,
    /// The stream's one template, when its packets differ only in the stamp and the flow: the
    /// fast path ([`fill_plain`]).
    plain: Option<Plain>,
    /// The fast path's next flow.
    flow: u32,
    /// Packets made and never sent (in a burst when the run stopped): neither sent nor short.
    unsent: u64,
    /// Departures with due times: how late they left.
    departed: Option<Departed>,
}

/// The times one burst is built at: ns from the loop's start (the rates' clock) for pacing,
/// and the send stamp's clock (the run's, or the device's).
#[derive(Clone, Copy)]
struct At {
    elapsed_ns: u64,
    due_by_ns: u64,
    now_ns: u64,
}

impl Lane {
    /// Makes `n` packets (what the pacer allows, or the lane's share of the room) into `burst`,
    /// stamped as leaving `at`; returns how many it made (fewer when the pool runs dry).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &mut self,
        t: &Traffic,
        burst: &mut Burst,
        held: &mut Held,
        n: usize,
        at: At,
        stride: u64,
        core: u64,
    ) -> Result<usize, Fail> {
        let first = self.pacer.made;
        let got = match &self.plain {
            Some(p) => {
                let (got, flow) = fill_plain(
                    p,
                    burst,
                    held,
                    n,
                    at.now_ns.to_be_bytes(),
                    first * stride + core,
                    stride,
                    self.flow,
                );
                self.flow = flow;
                self.bytes += (got * p.frame.len()) as u64;
                got
            }
            None => self.fill_general(t, burst, held, n, at.now_ns, stride, core)?,
        };
        // Their due times while they are still due and unmade (`Pacer::due_ns_of`).
        if let Some(d) = self.departed.as_mut() {
            for k in first..first + got as u64 {
                d.record(self.pacer.due_ns_of(k), at.elapsed_ns);
            }
        }
        self.pacer.made += got as u64;
        Ok(got)
    }

    /// [`Lane::fill`] for a stream of several sizes, varying fields, checksums computed here or a
    /// replay: each packet written by `Traffic::write`. Leaves the pacer's count to the caller.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn fill_general(
        &mut self,
        t: &Traffic,
        burst: &mut Burst,
        held: &mut Held,
        n: usize,
        now_ns: u64,
        stride: u64,
        core: u64,
    ) -> Result<usize, Fail> {
        let have = burst.len();
        let got = burst.alloc(n, self.fixed_len.unwrap_or(t.largest()));
        // The lane's state in locals for the loop, written back after it: kept in registers
        // rather than loaded and stored through `self` for every packet.
        let (mut k, mut bytes, mut cursor, fixed_len, flags) =
            (self.pacer.made, self.bytes, self.cursor, self.fixed_len, t.tx_flags);
        for i in have..have + got {
            // Sequence numbers interleave across cores, so every packet's number is unique.
            let seq = k * stride + core;
            if fixed_len.is_none() {
                let n = t.len_at(&cursor);
                burst
                    .set_len(i, n)
                    .map_err(|e| Fail::Runtime(format!("set_len: {e}")))?;
                bytes += n as u64;
            }
            let tag = held.of(burst.packet(i).buffer_index());
            t.write(&mut cursor, tag, seq, now_ns, burst.data_mut(i));
            if flags != 0 {
                burst.set_flags(i, flags);
            }
            k += 1;
        }
        if let Some(n) = fixed_len {
            bytes += (got * n) as u64;
        }
        (self.bytes, self.cursor) = (bytes, cursor);
        Ok(got)
    }
}

/// The fast path: `n` packets of one template, numbered from `seq` by `stride`, from flow
/// `flow` on, each written where its buffer does not hold the template already and else only
/// in the fields that change; returns how many and the next flow. A burst's packets share the
/// send time, its bytes swapped once.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fill_plain(
    p: &Plain,
    burst: &mut Burst,
    held: &mut Held,
    n: usize,
    now_be: [u8; 8],
    seq: u64,
    stride: u64,
    mut flow: u32,
) -> (usize, u32) {
    // The loop's values in locals (a store into a frame may alias anything behind a
    // reference, and would have them loaded again for every packet), and few of them, so that
    // they stay in registers: the number and the stream id as one word (the number never
    // reaches the id's byte).
    let (len, tag, off, flows) = (p.frame.len(), p.held, p.seq_off, p.flows);
    let mut seq_id = seq | p.id;
    let tags = held.all();
    let got = if flows > 1 {
        let (port_off, src_port) = (p.port_off, p.src_port);
        burst.alloc_with(n, len, p.tx_flags, |buf, frame| {
            let h = &mut tags[buf as usize];
            if *h != tag {
                p.put(frame, h);
            }
            let port = src_port.wrapping_add(flow as u16);
            frame[port_off..port_off + 2].copy_from_slice(&port.to_be_bytes());
            stamp(frame, off, seq_id, now_be);
            seq_id += stride;
            // A counter that wraps rather than `%`: no division per packet.
            flow += 1;
            if flow == flows {
                flow = 0;
            }
        })
    } else {
        burst.alloc_with(n, len, p.tx_flags, |buf, frame| {
            let h = &mut tags[buf as usize];
            if *h != tag {
                p.put(frame, h);
            }
            stamp(frame, off, seq_id, now_be);
            seq_id += stride;
        })
    };
    (got, flow)
}

impl Lane {
    /// Publishes what the lane has made (packets, bytes) for the reporter and the metrics:
    /// after each fill, before the frames go to a queue, so that no reader sees a frame
    /// received before it sees it sent (the receiver publishes after it took them; the metrics
    /// read received counts first).
    #[inline(always)]
    fn publish(&self, per_stream: &[StreamCounters], core: usize) {
        let c = &per_stream[self.stream].tx[core];
        c[0].store(self.pacer.made, Ordering::Release);
        c[1].store(self.bytes, Ordering::Release);
    }

    /// Publishes what the lane's rate asked of it by `elapsed_ns`, with what it made: every
    /// few hundred bursts, which is often enough to tell a stream short of its rate by 1 % in
    /// a second (the two lag each other by those bursts, well under 1 % of a second).
    fn publish_owed(&self, per_stream: &[StreamCounters], core: usize, elapsed_ns: u64) {
        self.publish(per_stream, core);
        let owed = self.pacer.owed(elapsed_ns).saturating_sub(self.unsent);
        per_stream[self.stream].owed[core].store(owed, Ordering::Release);
    }
}

/// What a transmit core keeps to build its bursts.
struct Maker {
    /// What each buffer of the core's pool holds.
    held: Held,
    /// Lanes `..paced` have rates, and share the room by them when they ask for more than it
    /// holds ([`Fair`]); the lanes after them, with no rate, take what is left.
    paced: usize,
    fair: Fair,
    /// The streams' rates may change while the run goes on (`--control`).
    live: bool,
    /// Per lane: what its pacer allows, then what it makes.
    want: Vec<usize>,
    /// Sequence numbers interleave across cores: core `core` numbers its packets
    /// `core, core + stride, ...`.
    stride: u64,
    core: u64,
}

/// Makes the packets of one burst into `burst`'s room: what each lane's pacer allows at `at`,
/// shared by the lanes' rates when that is more than the room. Returns how many it made.
#[inline(never)]
fn build_burst(
    lanes: &mut [Lane],
    m: &mut Maker,
    streams: &[Stream],
    burst: &mut Burst,
    per_stream: &[StreamCounters],
    at: At,
) -> Result<usize, Fail> {
    let room = burst.room();
    if let [l] = lanes {
        // One stream: all the pacer allows.
        let n = l.pacer.allowed(at.due_by_ns, room);
        if n == 0 {
            return Ok(0);
        }
        let made = l.fill(&streams[l.stream].traffic, burst, &mut m.held, n, at, m.stride, m.core)?;
        l.publish(per_stream, m.core as usize);
        return Ok(made);
    }
    for (w, l) in m.want.iter_mut().zip(lanes.iter_mut()) {
        *w = l.pacer.allowed(at.due_by_ns, room);
    }
    if m.paced > 1 {
        if m.live {
            // A rate changed through the control endpoint weighs from this burst on.
            m.fair.reweigh(lanes[..m.paced].iter().map(|l| l.pacer.rate_per_ns()));
        }
        m.fair.share(room, &mut m.want[..m.paced]);
    }
    let mut made = 0;
    for (l, &n) in lanes.iter_mut().zip(m.want.iter()) {
        let n = n.min(burst.room());
        if n == 0 {
            continue;
        }
        made += l.fill(&streams[l.stream].traffic, burst, &mut m.held, n, at, m.stride, m.core)?;
        l.publish(per_stream, m.core as usize);
    }
    Ok(made)
}

/// Takes the packets still in `burst` (made, never sent) off their streams' counts.
fn unsent(lanes: &mut [Lane], burst: &Burst) {
    for i in 0..burst.len() {
        let d = burst.data(i);
        let id = read_stamp(d).map_or(0, |(s, _, _)| usize::from(s));
        // A replay is one unstamped stream: lane 0.
        let k = lanes.iter().position(|l| l.stream == id).unwrap_or(0);
        if let Some(l) = lanes.get_mut(k) {
            l.pacer.made -= 1;
            l.unsent += 1;
            l.bytes -= d.len() as u64;
        }
    }
}

/// A transmit core: its own pool and `queues` send queues, round robin per burst; the first
/// core also sends the latency stream, if any, on a queue of its own (or, on a port with no queue
/// to spare, on its first queue beside the load).
pub(crate) fn transmit(
    plan: TxPlan,
    port: Arc<Port>,
    streams: Arc<Vec<Stream>>,
    epoch: Instant,
    stop: &AtomicBool,
    out: &Counters,
    inline_rx: Option<RxPlan>,
) -> Result<TxDone, Fail> {
    // A core that runs the receiver says it is ready however its set-up ends (an error, a
    // panic): the other cores wait for that, and then find this core's error or the stop flag.
    let rx_ready = plan.rx_ready.clone();
    let ready = inline_rx.is_some().then(|| rawpkt_sys::signal::SetOnDrop(&rx_ready));
    if let Some(cpu) = plan.cpu {
        if rawpkt_tools::cpu::pin(cpu) {
            out.cpu.store(cpu as u64 + 1, Ordering::Relaxed);
        } else {
            rawpkt_sys::errln!(
                "pktgen: core {}: could not pin to CPU {}; running unpinned",
                plan.core,
                cpu
            );
        }
    }
    let qcfg = QueueConfig::default();
    // The latency stream's queue, on the first core, holds buffers too.
    let lat_queue = u16::from(plan.core == 0 && streams.iter().any(|s| s.spec.latency));
    let buffers = (u32::from(plan.queues + lat_queue) * qcfg.size * 2 + 4 * plan.burst as u32).next_power_of_two();
    let pool = Pool::new(PoolConfig::default().buffers(buffers))
        .map_err(|e| Fail::rawpkt(format_args!("core {}: packet pool", plan.core), e))?;
    let largest = streams.iter().map(|s| s.traffic.largest()).max().unwrap_or(0);
    if largest > pool.data_room() as usize {
        return Err(Fail::Runtime(format!(
            "frames of {largest} bytes do not fit {}-byte buffers",
            pool.data_room()
        )));
    }
    let mut queues: Vec<Box<dyn TxQueue>> = (0..plan.queues)
        .map(|q| port.tx_queue((plan.core as u16) * plan.queues + q, &pool, &qcfg))
        .collect::<Result<_, _>>()
        .map_err(|e| Fail::rawpkt(port.spec(), e))?;
    let cores = plan.cores as u64;
    let core = plan.core as u64;
    // This core's share of each stream's count and rate; streams with no rate split the room of
    // each burst between them.
    let unpaced = streams
        .iter()
        .filter(|s| !s.spec.latency && s.spec.rate.is_none())
        .count();
    let lane = |i: usize, s: &Stream, share_of: u64| -> Result<Lane, Fail> {
        let pacer = Pacer::new(
            s.spec.rate.map(|r| r / share_of as f64),
            s.spec.shape,
            s.spec.count.map(|t| t / share_of + u64::from(core < t % share_of)),
            (i as u64) << 32 | core,
            plan.burst / unpaced.max(1),
            &s.traffic.times,
        );
        let pacer = match plan.controls.get(i) {
            Some(c) => pacer.controlled(c.clone(), share_of),
            None => pacer,
        };
        Ok(Lane {
            stream: i,
            departed: if pacer.per_departure() {
                Some(Departed::new(i)?)
            } else {
                None
            },
            pacer,
            cursor: crate::traffic::Cursor::default(),
            bytes: 0,
            fixed_len: s.traffic.fixed_len(),
            plain: s.traffic.plain(),
            flow: 0,
            unsent: 0,
        })
    };
    // Streams with a rate first: they share the room of a burst by their rates (`Fair`), and
    // those without one take what is left.
    let mut lanes: Vec<Lane> = streams
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.spec.latency)
        .map(|(i, s)| lane(i, s, cores))
        .collect::<Result<_, _>>()?;
    lanes.sort_by_key(|l| l.pacer.rate_per_ns().is_none());
    let weights: Vec<f64> = lanes.iter().map_while(|l| l.pacer.rate_per_ns()).collect();
    // The latency stream: first core only, its own queue and burst, so that it never waits
    // behind the load in a ring of ours.
    let mut latency = match streams.iter().position(|s| s.spec.latency) {
        Some(i) if plan.core == 0 => {
            let q = plan
                .latency_queue
                .map(|id| port.tx_queue(id, &pool, &qcfg))
                .transpose()
                .map_err(|e| Fail::rawpkt(format_args!("{}: the latency stream's queue", port.spec()), e))?;
            Some((vec![lane(i, &streams[i], 1)?], q, Burst::new(&pool, 4)))
        }
        _ => None,
    };
    let mut burst = Burst::new(&pool, plan.burst);
    let mut m = Maker {
        held: Held::new(pool.capacity()),
        paced: weights.len(),
        fair: Fair::new(&weights),
        live: !plan.controls.is_empty(),
        want: vec![0; lanes.len()],
        stride: cores,
        core,
    };
    // Departures with times of their own (Poisson, a timed replay) leave at those times, each
    // alone when the next is not due yet: the loop waits for the earliest due departure,
    // polling the receiver and reclaiming only while it is more than `RX_SLACK_NS` away and
    // spinning on the clock for the rest; the reading that ends the wait is the frames' send
    // stamp, taken just before they are built and handed to the queue. Frames due by then
    // (the loop was late) or within half a send after it (`SendCost`) go in that one burst,
    // stamped alike, as they leave: gaps of 0.
    let per_departure = !lanes.is_empty() && lanes.iter().all(|l| l.pacer.per_departure());
    // A receiver in this loop takes small bursts when it polls in the waits between
    // departures: a full one costs several µs, and the departure after it would leave that
    // late.
    let rx_burst = if per_departure {
        RX_BURST_BETWEEN_DEPARTURES
    } else {
        RX_BURST
    };
    let receiver = inline_rx.map(|p| Receiver::new(p, rx_burst)).transpose();
    drop(ready);
    let mut receiver = receiver?;
    while !rx_ready.load(Ordering::Acquire) && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut sent_since_poll = 0;
    let (mut send_cost, mut sent_at) = (SendCost::default(), None::<u64>);
    // The loop's clock (`Clock`: the TSC where it is invariant), ns from the run's epoch; the
    // rates count from the loop's start.
    let mut clock = Clock::new(epoch);
    let deadline_ns = plan
        .deadline
        .map(|d| d.saturating_duration_since(epoch).as_nanos() as u64);
    let start = clock.now_ns();
    let mut rr = 0;
    let mut iter = 0u32;
    loop {
        iter = iter.wrapping_add(1);
        // From the first iteration on: a Ctrl-C that came while the ports opened sends nothing.
        if iter % 64 == 1 && (stop.load(Ordering::Relaxed) || deadline_ns.is_some_and(|d| clock.now_ns() >= d)) {
            break;
        }
        // Per departure: whether the next one is far enough away to poll the receiver, else
        // the clock's reading once it is due.
        let (mut waiting, mut due_at, mut behind, mut due_by) = (false, None, false, 0);
        if per_departure {
            let next = lanes.iter().map(|l| l.pacer.next_due_ns()).min().unwrap_or(u64::MAX);
            let mut now = clock.now_ns();
            if let Some(t) = sent_at.take() {
                send_cost.sample(now - t);
            }
            let mut elapsed = now - start;
            loop {
                match crate::pace::step(next, elapsed, RX_SLACK_NS, &send_cost) {
                    Step::Wait => {
                        waiting = true;
                        break;
                    }
                    Step::SpinUntil(t) => {
                        while elapsed < t {
                            std::hint::spin_loop();
                            now = clock.now_ns();
                            elapsed = now - start;
                        }
                    }
                    Step::Send {
                        due_by: by,
                        behind: late,
                    } => {
                        (due_at, behind, due_by) = (Some(now), late, by);
                        break;
                    }
                }
            }
        }
        let room = if waiting { 0 } else { plan.burst - burst.len() };
        // The latency stream is looked at every 8th burst: its departures are then a few
        // hundred ns late at most, and its stamps say when each left.
        let lat_turn = latency.is_some() && iter.is_multiple_of(8);
        if room > 0 || lat_turn {
            // One clock read per burst: the rates' credit and the send stamp of every packet.
            let now = due_at.unwrap_or_else(|| clock.now_ns());
            let elapsed = now - start;
            let now_ns = if plan.hw_clock {
                // `main` checked that the port has a device clock.
                port.device_clock_ns().unwrap_or(0)
            } else {
                now
            };
            if room > 0 {
                let at = At {
                    elapsed_ns: elapsed,
                    due_by_ns: due_by.max(elapsed),
                    now_ns,
                };
                build_burst(&mut lanes, &mut m, &streams, &mut burst, &plan.per_stream, at)?;
            }
            if let Some((lat, q, b)) = latency.as_mut().filter(|_| lat_turn) {
                let t = &streams[lat[0].stream].traffic;
                let at = At {
                    elapsed_ns: elapsed,
                    due_by_ns: elapsed,
                    now_ns,
                };
                let n = lat[0].pacer.allowed(elapsed, b.room());
                if n > 0 && lat[0].fill(t, b, &mut m.held, n, at, 1, 0)? > 0 {
                    lat[0].publish(&plan.per_stream, plan.core);
                }
                if !b.is_empty() {
                    let q = match q {
                        Some(q) => q,
                        None => &mut queues[0],
                    };
                    q.tx_burst(b)
                        .map_err(|e| Fail::Runtime(format!("{}: {e}", port.spec())))?;
                }
            }
        }
        if !burst.is_empty() {
            sent_since_poll += queues[rr]
                .tx_burst(&mut burst)
                .map_err(|e| Fail::Runtime(format!("{}: {e}", port.spec())))?;
            rr += 1;
            if rr == queues.len() {
                rr = 0;
            }
            // A send alone, timed from its due time to the next look at the clock: what a
            // departure that joins it saves (not a turn of the latency stream, a catch-up poll
            // or a publication, which the next departure waits for as it would for a hold).
            if !lat_turn && !behind && !iter.is_multiple_of(PUBLISH_EVERY) {
                sent_at = due_at;
            }
        } else {
            for q in queues.iter_mut() {
                q.reclaim()
                    .map_err(|e| Fail::Runtime(format!("{}: {e}", port.spec())))?;
            }
            if lanes.iter().all(|l| l.pacer.done()) {
                break;
            }
        }
        // Per departure, the receiver takes the waits. When the loop is behind (after a stall:
        // the departure it just sent was already late) and has not polled for half a receive
        // burst's worth of frames, it takes up to eight bursts, so that its ring drains while
        // the sends catch up. Not when the loop is on time: a run of short gaps (16 under 2 µs
        // in a row, one time in eleven at 1 Mpps) then made the next departure several µs late,
        // ~5,500 late departures a second (measured per departure, SCHED_FIFO, load 4).
        if let Some(r) = receiver.as_mut() {
            if !per_departure || waiting {
                r.poll()?;
                sent_since_poll = 0;
            } else if behind && sent_since_poll >= rx_burst / 2 {
                for _ in 0..8 {
                    if r.poll()? < rx_burst {
                        break;
                    }
                }
                sent_since_poll = 0;
            }
        }
        if iter.is_multiple_of(PUBLISH_EVERY) {
            let (p, b, d, e) = totals(
                queues
                    .iter()
                    .chain(latency.as_ref().and_then(|l| l.1.as_ref()))
                    .map(|q| q.stats()),
            );
            out.publish(p, b, d, e);
            let elapsed = clock.now_ns() - start;
            publish_lanes(
                &lanes,
                latency.as_ref().map(|l| &l.0[..]),
                &plan.per_stream,
                plan.core,
                elapsed,
            );
        }
    }
    let sending_ns = clock.now_ns() - start;
    // Unsent packets go back to the pool; sent ones complete before the queues close.
    unsent(&mut lanes, &burst);
    burst.clear();
    if let Some((lat, _, b)) = latency.as_mut() {
        unsent(lat, b);
        b.clear();
    }
    let give_up = Instant::now() + Duration::from_secs(2);
    type Latency = Option<(Vec<Lane>, Option<Box<dyn TxQueue>>, Burst)>;
    let in_flight = |qs: &[Box<dyn TxQueue>], lat: &Latency| {
        qs.iter()
            .chain(lat.as_ref().and_then(|l| l.1.as_ref()))
            .any(|q| q.in_flight() > 0)
    };
    while in_flight(&queues, &latency) && Instant::now() < give_up {
        for q in queues.iter_mut().chain(latency.as_mut().and_then(|l| l.1.as_mut())) {
            let _ = q.reclaim();
        }
        if let Some(r) = receiver.as_mut() {
            r.poll()?;
        }
    }
    let (p, b, d, e) = totals(
        queues
            .iter()
            .chain(latency.as_ref().and_then(|l| l.1.as_ref()))
            .map(|q| q.stats()),
    );
    out.publish(p, b, d, e);
    publish_lanes(
        &lanes,
        latency.as_ref().map(|l| &l.0[..]),
        &plan.per_stream,
        plan.core,
        sending_ns,
    );
    out.active_ns.store(sending_ns, Ordering::Relaxed);
    Ok(TxDone {
        rx: receiver.map(Receiver::finish).transpose()?,
        departed: lanes.into_iter().filter_map(|l| l.departed).collect(),
    })
}

/// What a transmit core hands back: the receiver's histograms if it ran the receiver, and
/// the departures it timed.
pub(crate) struct TxDone {
    pub rx: Option<Vec<RxHists>>,
    pub departed: Vec<Departed>,
}

fn publish_lanes(
    lanes: &[Lane],
    latency: Option<&[Lane]>,
    per_stream: &[StreamCounters],
    core: usize,
    elapsed_ns: u64,
) {
    for l in lanes.iter().chain(latency.into_iter().flatten()) {
        l.publish_owed(per_stream, core, elapsed_ns);
    }
}

pub(crate) type Capture = rawpkt_tools::pcap::Writer<std::io::BufWriter<rawpkt_tools::pcap::Output>>;

/// What a receiver is built from; it is built in the thread that polls it (pools are per core).
pub(crate) struct RxPlan {
    pub port: Arc<Port>,
    pub capture: Option<Capture>,
    pub counters: Arc<Counters>,
    pub streams: Arc<Vec<StreamCounters>>,
    /// Whether to read stamps: not in a replay, whose frames may carry another run's.
    pub stamps: bool,
    pub epoch: Instant,
    /// The stamps are the device clock's: latency is the frame's receive timestamp minus its
    /// stamp (`QueueConfig::rx_timestamps`).
    pub hw_clock: bool,
    /// The receive queue's configuration (--rx-mode), before its size and timestamps.
    pub rx_queue: QueueConfig,
    /// The senders' counters, when they are final by the time the receiver drains (see
    /// [`Receiver::finish`]).
    pub sent: Option<Vec<Arc<Counters>>>,
}

/// What the receiver measured of one stream: latency, and inter-departure times if asked for.
pub(crate) struct RxHists {
    pub latency: Histogram<u64>,
    pub gaps: Option<Histogram<u64>>,
    /// Each sending core's sequence, as received (`seq`).
    pub seqs: Vec<SeqTracker>,
}

/// What the receiver knows of one stream between publications.
struct RxStream {
    packets: u64,
    bytes: u64,
    hist: Histogram<u64>,
    lat_sum: u64,
    lat_max: u64,
    /// RFC 3550 section 6.4.1: J += (|D| - J) / 16, D the change in transit time between
    /// consecutive frames of the stream; the last transit time.
    jitter: f64,
    transit: Option<i64>,
    /// Inter-departure times (gaps between consecutive send stamps), when asked for, and the
    /// last send stamp.
    gaps: Option<Histogram<u64>>,
    sent: u64,
    /// One per core that sends the stream: its numbers are `k * seqs.len() + core`.
    seqs: Vec<SeqTracker>,
}

/// The receiver: counts, measures latency from the stamps, and captures. Polled by its own
/// thread when a CPU is free for it, else from the first transmit core's loop. It reads every
/// receive queue the port has (`Port::rx_queues`), one burst of one queue a poll, in turn: the
/// frames of a stream reach whichever queue the device steers them to (an `xdp:` veth delivers
/// what its peer sent on queue `q` to its queue `q`), and a queue nobody reads loses them all.
pub(crate) struct Receiver {
    port: Arc<Port>,
    rx: Vec<Box<dyn rawpkt::RxQueue>>,
    /// The queue the next poll reads.
    next: usize,
    got: Burst,
    streams: Vec<RxStream>,
    shared: Arc<Vec<StreamCounters>>,
    capture: Option<Capture>,
    capture_error: Option<String>,
    counters: Arc<Counters>,
    epoch: Instant,
    /// Unix time of `epoch` in ns: captures are dated in wall-clock time, as pcap readers expect.
    unix_base_ns: u64,
    iter: u32,
    stamps: bool,
    hw_clock: bool,
    /// With receive timestamps: the device clock's reading at `epoch`, to date captured frames
    /// by their own arrival rather than by the burst that took them.
    dev_epoch: Option<u64>,
    /// A capture without receive timestamps: when each queue was last polled (ns from
    /// `epoch`), the start of the window its next burst's frames arrived in (`spread`).
    looked: Option<Vec<u64>>,
    /// The senders' final counters (`RxPlan::sent`).
    sent: Option<Vec<Arc<Counters>>>,
}

impl Receiver {
    /// A receiver that takes at most `burst` (up to `RX_BURST`) frames a poll.
    pub(crate) fn new(plan: RxPlan, burst: usize) -> Result<Receiver, Fail> {
        // A capture takes each frame's device timestamp where the port has them: a receive
        // burst's frames arrived at different times, and the gaps between them are what a
        // capture is read for (a timed replay reproduces them).
        let dev_epoch = match plan.port.device_clock_ns() {
            Some(now) if plan.hw_clock || plan.capture.is_some() => {
                Some(now.wrapping_sub(plan.epoch.elapsed().as_nanos() as u64))
            }
            _ => None,
        };
        let qcfg = plan.rx_queue.clone().size(4096).rx_timestamps(dev_epoch.is_some());
        let queues = plan.port.rx_queues().max(1);
        // Each queue's ring full, twice over, and the bursts in hand.
        let buffers = (u32::from(queues) * qcfg.size * 2 + 4 * RX_BURST as u32)
            .next_power_of_two()
            .max(16384);
        let pool =
            Pool::new(PoolConfig::default().buffers(buffers)).map_err(|e| Fail::rawpkt("receiver: packet pool", e))?;
        let rx = (0..queues)
            .map(|q| plan.port.rx_queue(q, &pool, &qcfg))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Fail::rawpkt(plan.port.spec(), e))?;
        let streams = plan
            .streams
            .iter()
            .map(|c| {
                Ok(RxStream {
                    packets: 0,
                    bytes: 0,
                    hist: time_hist()?,
                    gaps: if c.gaps { Some(time_hist()?) } else { None },
                    sent: NO_STAMP,
                    seqs: (0..c.cores().max(1)).map(|_| SeqTracker::default()).collect(),
                    lat_sum: 0,
                    lat_max: 0,
                    jitter: 0.0,
                    transit: None,
                })
            })
            .collect::<Result<_, Fail>>()?;
        let looked = (plan.capture.is_some() && dev_epoch.is_none())
            .then(|| vec![plan.epoch.elapsed().as_nanos() as u64; usize::from(queues)]);
        Ok(Receiver {
            rx,
            next: 0,
            got: Burst::new(&pool, burst.min(RX_BURST)),
            streams,
            shared: plan.streams,
            port: plan.port,
            capture: plan.capture,
            capture_error: None,
            counters: plan.counters,
            unix_base_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
                .saturating_sub(plan.epoch.elapsed().as_nanos() as u64),
            looked,
            epoch: plan.epoch,
            iter: 0,
            stamps: plan.stamps,
            hw_clock: plan.hw_clock,
            dev_epoch,
            sent: plan.sent,
        })
    }

    /// One receive burst; returns the packets it took.
    #[inline]
    pub(crate) fn poll(&mut self) -> Result<usize, Fail> {
        self.iter = self.iter.wrapping_add(1);
        let q = self.next;
        self.next = if q + 1 == self.rx.len() { 0 } else { q + 1 };
        let n = self.rx[q]
            .rx_burst(&mut self.got)
            .map_err(|e| Fail::Runtime(format!("{}: {e}", self.port.spec())))?;
        // A capture without device timestamps reads the clock at every poll, empty or not: the
        // frames a burst takes arrived since the queue's last poll.
        let since = match self.looked.as_mut() {
            Some(l) if n == 0 => {
                l[q] = self.epoch.elapsed().as_nanos() as u64;
                0
            }
            Some(l) => l[q],
            None => 0,
        };
        if n > 0 {
            let now = self.epoch.elapsed().as_nanos() as u64;
            if let Some(l) = self.looked.as_mut() {
                l[q] = now;
            }
            // The stamps first, in a loop that does nothing else: every frame is a cache miss
            // (the NIC just wrote it from the other core), and a short loop body lets the CPU
            // have many of them in flight at once.
            let count = if self.stamps { self.got.len().min(RX_BURST) } else { 0 };
            let mut sent = [NO_STAMP; RX_BURST];
            let mut ids = [0u8; RX_BURST];
            let mut seqs = [0u64; RX_BURST];
            for (i, ((s, id), q)) in sent[..count]
                .iter_mut()
                .zip(&mut ids[..count])
                .zip(&mut seqs[..count])
                .enumerate()
            {
                if let Some((stream, seq, t)) = read_stamp(self.got.data(i)) {
                    (*s, *id, *q) = (t, stream, seq);
                }
            }
            for (i, ((&t, &id), &seq)) in sent[..count].iter().zip(&ids[..count]).zip(&seqs[..count]).enumerate() {
                // Frames of no stream of ours (unstamped, or a stream id we did not send) count
                // at the port only.
                let Some(st) = self.streams.get_mut(usize::from(id)).filter(|_| t != NO_STAMP) else {
                    continue;
                };
                // With device stamps, the time this frame reached the device, on the clock the
                // sender stamped it with; else the time of the burst, on the run's clock.
                let now = if self.hw_clock {
                    self.got.packet(i).timestamp()
                } else {
                    now
                };
                let lat = now.saturating_sub(t).max(1);
                let cores = st.seqs.len() as u64;
                let (k, core) = if cores == 1 {
                    (seq, 0)
                } else {
                    (seq / cores, seq % cores)
                };
                st.seqs[core as usize].record(k);
                st.packets += 1;
                st.bytes += self.got.data(i).len() as u64;
                st.hist.saturating_record(lat);
                st.lat_sum += lat;
                st.lat_max = st.lat_max.max(lat);
                let transit = now as i64 - t as i64;
                if let Some(prev) = st.transit.replace(transit) {
                    st.jitter += ((transit - prev).unsigned_abs() as f64 - st.jitter) / 16.0;
                }
                if let Some(g) = st.gaps.as_mut() {
                    // Frames of one core arrive in the order they left; a frame of another
                    // core that left earlier is not a gap.
                    if st.sent != NO_STAMP && t >= st.sent {
                        g.saturating_record(t - st.sent);
                    }
                    st.sent = t;
                }
            }
            if let Some(w) = self.capture.as_mut() {
                let n = self.got.len();
                for i in 0..n {
                    let at = match self.dev_epoch {
                        Some(e) => self.got.packet(i).timestamp().wrapping_sub(e),
                        None => spread(since, now, i, n),
                    };
                    if let Err(e) = w.write(self.unix_base_ns.wrapping_add(at), self.got.data(i)) {
                        self.capture_error.get_or_insert(e.to_string());
                        break;
                    }
                }
                if self.capture_error.is_some() {
                    self.capture = None;
                }
            }
            self.got.clear();
        }
        if n == 0 || self.iter.is_multiple_of(PUBLISH_EVERY) {
            self.publish();
        }
        Ok(n)
    }

    fn publish(&mut self) {
        // Quantiles walk the histogram (some µs): every 16th publication, and at the end.
        let quantiles = self.iter.is_multiple_of(PUBLISH_EVERY * 16) || self.iter == u32::MAX;
        let (packets, bytes, drops, errors) = totals(self.rx.iter().map(|q| q.stats()));
        self.counters.publish(packets, bytes, drops, errors);
        for (st, c) in self.streams.iter_mut().zip(self.shared.iter()) {
            c.rx_packets.store(st.packets, Ordering::Release);
            c.rx_bytes.store(st.bytes, Ordering::Release);
            c.lat_sum_ns.store(st.lat_sum, Ordering::Relaxed);
            c.lat_samples.store(st.hist.len(), Ordering::Relaxed);
            c.lat_max_ns.fetch_max(st.lat_max, Ordering::Relaxed);
            c.jitter_ns.store(st.jitter as u64, Ordering::Relaxed);
            let sum = |f: fn(&SeqTracker) -> u64| st.seqs.iter().map(f).sum::<u64>();
            c.duplicates.store(sum(|q| q.duplicates), Ordering::Release);
            c.out_of_order.store(sum(|q| q.out_of_order), Ordering::Release);
            c.lost.store(sum(|q| q.lost), Ordering::Release);
            st.lat_max = 0;
            if quantiles && !st.hist.is_empty() {
                c.lat_p50_ns.store(st.hist.value_at_quantile(0.5), Ordering::Relaxed);
                c.lat_p99_ns.store(st.hist.value_at_quantile(0.99), Ordering::Relaxed);
                c.lat_p999_ns.store(st.hist.value_at_quantile(0.999), Ordering::Relaxed);
            }
        }
    }

    /// After the senders stop: takes stragglers until every frame sent is received or dropped
    /// by the device, where the receiver knows what was sent (`RxPlan::sent`), so that a busy
    /// machine's slow device or receiver loses nothing to a drain cut short; for the frames
    /// that never come, until the line has been quiet for half a second, ten at most. Where what was
    /// sent is not known, until it has been quiet for 200 ms (50 ms after Ctrl-C), two seconds
    /// at most (a port with background traffic is never quiet). Returns each stream's latency
    /// histogram.
    pub(crate) fn finish(mut self) -> Result<Vec<RxHists>, Fail> {
        let mut quiet_since = Instant::now();
        let (quiet, most) = match self.sent {
            Some(_) => (Duration::from_millis(500), Duration::from_secs(10)),
            None => (Duration::from_millis(200), Duration::from_secs(2)),
        };
        let give_up = quiet_since + most;
        let stop = rawpkt_sys::signal::stop_flag();
        let sent: Option<u64> = self.sent.as_ref().map(|c| c.iter().map(|c| c.snapshot()[0]).sum());
        // Received (once: a duplicate is no frame more), or else (now and then: an mlx5 port's
        // count is a sysfs read) dropped.
        let accounted = |r: &Receiver, k: u32| {
            let Some(s) = sent else { return false };
            let dups: u64 = r.streams.iter().flat_map(|s| &s.seqs).map(|q| q.duplicates).sum();
            let got = r.rx.iter().map(|q| q.stats().packets).sum::<u64>().saturating_sub(dups);
            got >= s || (k.is_multiple_of(256) && got + r.port.device_drops().unwrap_or(0) >= s)
        };
        let mut k = 0u32;
        while quiet_since.elapsed() < quiet && Instant::now() < give_up {
            if accounted(&self, k) {
                break;
            }
            k = k.wrapping_add(1);
            if self.poll()? > 0 {
                quiet_since = Instant::now();
            }
            if stop.load(Ordering::Relaxed) && sent.is_none() && quiet_since.elapsed() > Duration::from_millis(50) {
                break;
            }
        }
        self.iter = u32::MAX;
        self.publish();
        if let Some(mut w) = self.capture.take() {
            w.flush().map_err(|e| Fail::Runtime(e.to_string()))?;
        }
        match self.capture_error {
            Some(e) => Err(Fail::Runtime(format!("capture stopped: {e}"))),
            None => Ok(self
                .streams
                .into_iter()
                .map(|s| RxHists {
                    latency: s.hist,
                    gaps: s.gaps,
                    seqs: s.seqs,
                })
                .collect()),
        }
    }
}

/// The capture time of frame `i` of the `n` a receive burst took at `now`, on a port without
/// receive timestamps, when the queue was last polled at `since` (ns from the run's start): the
/// frames arrived in that window, in order, so they are dated evenly over it, the last at `now`.
/// Each time is within the window of its frame's arrival at the receive queue (frames of one
/// burst get distinct, increasing times whenever the window has a ns per frame, which a poll
/// always takes), and the times of a queue's frames never go back.
#[inline]
fn spread(since: u64, now: u64, i: usize, n: usize) -> u64 {
    let window = now.saturating_sub(since);
    now - window * (n - 1 - i) as u64 / n as u64
}

/// A receiver on its own thread: says when its queue exists (frames that arrive before it are
/// not ours to count), polls until the senders are done, then finishes.
pub(crate) fn receive(plan: RxPlan, tx_done: &AtomicBool, ready: &AtomicBool) -> Result<Vec<RxHists>, Fail> {
    let r = Receiver::new(plan, RX_BURST);
    ready.store(true, Ordering::Release);
    let mut r = r?;
    while !tx_done.load(Ordering::Relaxed) {
        r.poll()?;
    }
    r.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst's frames are dated over the window since the last poll, in order, the last at
    /// the poll's time, never before the window.
    #[test]
    fn capture_times_spread_over_the_window_since_the_last_poll() {
        let t: Vec<u64> = (0..4).map(|i| spread(1000, 1400, i, 4)).collect();
        assert_eq!(t, [1100, 1200, 1300, 1400]);
        assert_eq!(spread(1000, 1000, 0, 3), 1000);
        assert_eq!(spread(5, 9, 0, 1), 9);
        // Over a long run of bursts of random sizes and windows: increasing, within each window.
        let (mut rng, mut since, mut last) = (7u64, 0u64, 0u64);
        for _ in 0..10_000 {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let n = 1 + (rng >> 40) as usize % 256;
            let now = since + n as u64 + (rng >> 20) % 100_000;
            for i in 0..n {
                let t = spread(since, now, i, n);
                assert!(
                    t > last && t > since && t <= now,
                    "{since} {now} {i}/{n}: {t} after {last}"
                );
                last = t;
            }
            since = now;
        }
    }

    /// Lateness is the send time minus the due time; a gap counts as on time only when both
    /// its ends do.
    #[test]
    fn late_departures_are_counted_and_their_gaps_left_out() {
        let mut d = Departed::new(0).unwrap();
        // Due at 0, 1000, 2000, 3000, 9000; the third leaves 5 µs late, the fourth with it.
        for (due, at) in [(0, 10), (1000, 1100), (2000, 7000), (3000, 7000), (9000, 9050)] {
            d.record(due, at);
        }
        assert_eq!((d.departures, d.late), (5, 2));
        assert_eq!(d.lateness.max(), d.lateness.highest_equivalent(5000));
        // Only 10 -> 1100 has two on-time ends (7000 -> 9050 starts late).
        assert_eq!(d.on_time_gaps.len(), 1);
        assert_eq!(d.on_time_gaps.max(), d.on_time_gaps.highest_equivalent(1090));
        let mut all = Departed::new(0).unwrap();
        all.add(&d);
        all.add(&d);
        assert_eq!((all.departures, all.late, all.on_time_gaps.len()), (10, 4, 2));
    }
}
