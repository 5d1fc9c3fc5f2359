//! A traffic source and sink inside the process that loaded the library, for tests of programs
//! that forward between the model's devices (`RAWPKT_MODEL_TRAFFIC`, docs/model-library.md).
//!
//! The model lives in the process that loads the library: another process has a model of its
//! own, and nothing crosses between them. So a test that runs a forwarder (the l2-xconnect
//! example on mlx5_1 and mlx5_2) as a child cannot send into mlx5_0 or collect from mlx5_3 from
//! the test process. This module does it from a thread of the forwarder's own process, with
//! rawpkt ports on the free ends (the rawpkt linked into this library opens them through the
//! same library, as `RAWPKT_LIBIBVERBS` names it), and reports on stderr.
//!
//! `RAWPKT_MODEL_TRAFFIC="tx=SPEC rx=SPEC dst=MAC count=N [pps=R] [window=W] [done=sigint]"`:
//! send `count` numbered frames to `dst` on port `tx`, at most `pps` per second and at most
//! `window` ahead of what port `rx` (a rule steals frames to `dst`) has received, and check that
//! each one arrives once, in order and byte for byte. Before them, probes go out every 2 ms until
//! one comes through, so the numbered frames start once the forwarder is up. Then one line on
//! stderr, `model traffic: ok ...` or `model traffic: FAILED: ...`, and with `done=sigint` a
//! SIGINT to this process, which stops a forwarder that stops on Ctrl-C.
//!
//! With `rx=none` the thread only sends, for a receiver it cannot see (dpdk-testpmd in `rxonly`
//! mode on the device `dst` belongs to): probes every 2 ms until one lands in a receive queue of
//! that device (its `rx_frames` counter moves), then the `count` numbered frames at `pps`, with
//! no window; `model traffic: ok sent=N probes_sent=P secs=S`.

use std::rc::Rc;
use std::time::{Duration, Instant};

use rawpkt::LibPaths;
use rawpkt::{Burst, Pool, PoolConfig, Port, PortOptions, QueueConfig, RxQueue, TxQueue};
use rawpkt_wire::rule::FlowRule;

/// [`rawpkt::open_with`] on the environment's rdma-core files (`RAWPKT_LIBIBVERBS`: this
/// library), as the tools take them.
fn open_with(spec: &str, opts: &PortOptions) -> Result<Port, rawpkt::Error> {
    let opts = opts
        .clone()
        .rdma_core(LibPaths::from_env().or_else(|| opts.rdma_core.clone()));
    rawpkt::open_with(spec, &opts)
}

/// The frames' EtherType (IEEE 802 local experimental 1) and the tag after it.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];
const MAGIC: &[u8; 4] = b"RPMT";
const PROBE: u8 = 0;
const NUMBERED: u8 = 1;
const SRC: [u8; 6] = [0x02, 0x54, 0x52, 0x46, 0x00, 0x00];
/// No frame received for this long ends the run.
const STALL: Duration = Duration::from_secs(10);
/// For the first probe to come through.
const PROBE_LIMIT: Duration = Duration::from_secs(30);

struct Plan {
    tx: String,
    rx: String,
    dst: [u8; 6],
    count: u64,
    pps: u64,
    window: u64,
    sigint: bool,
}

fn parse(s: &str) -> Result<Plan, String> {
    let mut p = Plan {
        tx: String::new(),
        rx: String::new(),
        dst: [0; 6],
        count: 0,
        pps: 100_000,
        window: 256,
        sigint: false,
    };
    let num = |k: &str, v: &str| v.parse::<u64>().map_err(|_| format!("{k}={v}: not a number"));
    for kv in s.split_whitespace() {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("{kv}: expected KEY=VALUE"))?;
        match k {
            "tx" => p.tx = v.into(),
            "rx" => p.rx = v.into(),
            "dst" => {
                p.dst = rawpkt_wire::rule::parse_mac(v).ok_or_else(|| format!("dst={v}: not a MAC"))?;
            }
            "count" => p.count = num(k, v)?,
            "pps" => p.pps = num(k, v)?.max(1),
            "window" => p.window = num(k, v)?.clamp(1, 1024),
            "done" if v == "sigint" => p.sigint = true,
            _ => return Err(format!("{kv}: unknown key or value")),
        }
    }
    if p.tx.is_empty() || p.rx.is_empty() || p.dst == [0; 6] || p.count == 0 {
        return Err("tx=, rx=, dst= and count= are required".into());
    }
    if p.rx == "none" && !crate::global::DEVS.iter().any(|d| d.mac == p.dst) {
        return Err("rx=none: dst= must be one of the model's devices' MACs".into());
    }
    Ok(p)
}

/// Starts the thread when `RAWPKT_MODEL_TRAFFIC` is set (once, from the model's creation).
pub(crate) fn start_from_env() {
    let Some(v) = std::env::var_os("RAWPKT_MODEL_TRAFFIC") else {
        return;
    };
    let plan = match parse(&v.to_string_lossy()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("model traffic: FAILED: RAWPKT_MODEL_TRAFFIC: {e}");
            return;
        }
    };
    let spawned = std::thread::Builder::new().name("model-traffic".into()).spawn(move || {
        // The ports open through this library's own verbs, which wait for the model's creation
        // (the caller) to finish.
        match run(&plan) {
            Ok(line) => eprintln!("model traffic: ok {line}"),
            Err(e) => eprintln!("model traffic: FAILED: {e}"),
        }
        if plan.sigint {
            // SAFETY: kill(2) on our own pid with a standard signal; no memory is involved.
            unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
        }
    });
    if let Err(e) = spawned {
        eprintln!("model traffic: FAILED: no thread: {e}");
    }
}

fn frame(dst: [u8; 6], kind: u8, seq: u64) -> Vec<u8> {
    let mut f = Vec::with_capacity(128);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&SRC);
    f.extend_from_slice(&ETHERTYPE);
    f.extend_from_slice(MAGIC);
    f.push(kind);
    f.extend_from_slice(&seq.to_be_bytes());
    // 60 to 187 bytes, the rest a pattern of the sequence number.
    let len = 60 + (seq % 128) as usize;
    let mut x = seq.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while f.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        f.push(x as u8);
    }
    f
}

/// The kind and number of one of our frames.
fn tag(f: &[u8]) -> Option<(u8, u64)> {
    if f.len() < 27 || f[12..14] != ETHERTYPE || &f[14..18] != MAGIC {
        return None;
    }
    Some((f[18], u64::from_be_bytes(f[19..27].try_into().ok()?)))
}

struct Sink {
    dst: [u8; 6],
    probes: u64,
    next: u64,
}

impl Sink {
    fn take(&mut self, rx: &mut dyn RxQueue, b: &mut Burst) -> Result<usize, String> {
        let n = rx.rx_burst(b).map_err(|e| format!("rx: {e}"))?;
        for i in 0..b.len() {
            let f = b.data(i);
            match tag(f) {
                Some((PROBE, _)) if self.next == 0 => self.probes += 1,
                Some((NUMBERED, seq)) if seq == self.next => {
                    if f != frame(self.dst, NUMBERED, seq).as_slice() {
                        return Err(format!("frame {seq} arrived modified: {f:02x?}"));
                    }
                    self.next += 1;
                }
                Some((NUMBERED, seq)) => return Err(format!("frame {seq} arrived when {} was expected", self.next)),
                _ => return Err(format!("an unexpected frame arrived: {f:02x?}")),
            }
        }
        b.clear();
        Ok(n)
    }
}

fn send(tx: &mut dyn TxQueue, b: &mut Burst, frames: impl Iterator<Item = Vec<u8>>) -> Result<usize, String> {
    for f in frames {
        if !b.push_copy(&f) {
            return Err("no buffer for a frame".into());
        }
    }
    let n = b.len();
    let deadline = Instant::now() + STALL;
    while !b.is_empty() {
        tx.tx_burst(b).map_err(|e| format!("tx: {e}"))?;
        if Instant::now() > deadline {
            return Err("the TX ring stayed full".into());
        }
    }
    Ok(n)
}

fn run(p: &Plan) -> Result<String, String> {
    let pool: Rc<Pool> = Pool::new(PoolConfig::default().buffers(4096)).map_err(|e| format!("pool: {e}"))?;
    let q = QueueConfig::default().size(1024);
    let tx_port = open_with(&p.tx, &PortOptions::default()).map_err(|e| format!("{}: {e}", p.tx))?;
    if p.rx == "none" {
        let mut tx = tx_port.tx_queue(0, &pool, &q).map_err(|e| format!("{}: {e}", p.tx))?;
        return send_only(p, tx.as_mut(), &pool);
    }
    let mac = p.dst.map(|b| format!("{b:02x}")).join(":");
    let rule: FlowRule = format!("dst-mac {mac}").parse().map_err(|e| format!("rule: {e}"))?;
    let rx_opts = PortOptions::default().rules(vec![rule]);
    let rx_port = open_with(&p.rx, &rx_opts).map_err(|e| format!("{}: {e}", p.rx))?;
    let mut tx = tx_port.tx_queue(0, &pool, &q).map_err(|e| format!("{}: {e}", p.tx))?;
    let mut rx = rx_port.rx_queue(0, &pool, &q).map_err(|e| format!("{}: {e}", p.rx))?;
    let mut tb = Burst::new(&pool, 32);
    let mut rb = Burst::new(&pool, 64);
    let mut sink = Sink {
        dst: p.dst,
        probes: 0,
        next: 0,
    };

    // Probes until one comes through.
    let start = Instant::now();
    let mut probes = 0u64;
    let mut last_probe: Option<Instant> = None;
    while sink.probes == 0 {
        if last_probe.is_none_or(|t| t.elapsed() >= Duration::from_millis(2)) {
            send(tx.as_mut(), &mut tb, std::iter::once(frame(p.dst, PROBE, probes)))?;
            probes += 1;
            last_probe = Some(Instant::now());
        }
        if sink.take(rx.as_mut(), &mut rb)? == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
        if start.elapsed() > PROBE_LIMIT {
            return Err(format!(
                "none of {probes} probes from {} reached {} in {PROBE_LIMIT:?}",
                p.tx, p.rx
            ));
        }
    }

    // The numbered frames, paced and windowed.
    let begin = Instant::now();
    let mut sent = 0u64;
    let mut progress = Instant::now();
    while sink.next < p.count {
        let credit = (begin.elapsed().as_secs_f64() * p.pps as f64) as u64;
        let room = p.window.saturating_sub(sent - sink.next);
        let n = credit.saturating_sub(sent).min(room).min(p.count - sent).min(32);
        if n > 0 {
            sent += send(
                tx.as_mut(),
                &mut tb,
                (sent..sent + n).map(|s| frame(p.dst, NUMBERED, s)),
            )? as u64;
        }
        let got = sink.take(rx.as_mut(), &mut rb)?;
        if got > 0 {
            progress = Instant::now();
        } else {
            if progress.elapsed() > STALL {
                return Err(format!(
                    "sent {sent}, received {} and nothing more for {STALL:?}",
                    sink.next
                ));
            }
            if n == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
    let secs = begin.elapsed().as_secs_f64();
    // Nothing more may arrive (a duplicate, a late probe).
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(50) {
        if sink.take(rx.as_mut(), &mut rb)? == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let _ = tx.reclaim();
    Ok(format!(
        "sent={sent} received={} in_order=yes unmodified=yes probes_sent={probes} probes_received={} secs={secs:.3}",
        sink.next, sink.probes
    ))
}

/// `rx=none`: probes until one lands in a receive queue of `dst`'s device, then the numbered
/// frames, paced, unwatched.
fn send_only(p: &Plan, tx: &mut dyn TxQueue, pool: &Rc<Pool>) -> Result<String, String> {
    let g = crate::global::global().map_err(|e| format!("the model: errno {e}"))?;
    let port = crate::global::DEVS
        .iter()
        .position(|d| d.mac == p.dst)
        .ok_or("dst is not a device's MAC")?;
    let landed = || g.nic.port_counters(port).rx_frames;
    // The sending device (`tx`'s ibdev), whose wire count says when the last frame has left.
    let from = crate::global::DEVS
        .iter()
        .position(|d| p.tx.contains(d.ibdev))
        .ok_or("tx= names none of the model's devices")?;
    let on_wire = || g.nic.port_counters(from).tx_frames;
    let wire_before = on_wire();
    let mut tb = Burst::new(pool, 32);
    let (start, before) = (Instant::now(), landed());
    let mut probes = 0u64;
    while landed() == before {
        if start.elapsed() > PROBE_LIMIT {
            return Err(format!(
                "none of {probes} probes from {} reached a receive queue in {PROBE_LIMIT:?}",
                p.tx
            ));
        }
        send(tx, &mut tb, std::iter::once(frame(p.dst, PROBE, probes)))?;
        probes += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    let begin = Instant::now();
    let mut sent = 0u64;
    // Frames the thread was owed but did not send while it was off the CPU: forgiven, not sent
    // in a rush afterwards, so that no millisecond carries more than pps allows (a receiver
    // without flow control drops what a burst above the rate brings).
    let mut forgiven = 0u64;
    let slack = (p.pps / 1000).max(32);
    while sent < p.count {
        let mut credit = ((begin.elapsed().as_secs_f64() * p.pps as f64) as u64).saturating_sub(forgiven);
        if credit > sent + slack {
            forgiven += credit - sent - slack;
            credit = sent + slack;
        }
        let n = credit.saturating_sub(sent).min(p.count - sent).min(32);
        if n == 0 {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        sent += send(tx, &mut tb, (sent..sent + n).map(|s| frame(p.dst, NUMBERED, s)))? as u64;
    }
    let secs = begin.elapsed().as_secs_f64();
    // Done once the device has sent them all: the queue goes when this returns, and with it
    // whatever it still held.
    let last = Instant::now();
    while on_wire() - wire_before < sent + probes {
        let _ = tx.reclaim();
        if last.elapsed() > STALL {
            return Err(format!(
                "sent {sent} and {probes} probes, the device put {} on the wire",
                on_wire() - wire_before
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(format!("sent={sent} probes_sent={probes} secs={secs:.3}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_and_frames() {
        let p = parse("tx=mlx5:mlx5_0/1 rx=mlx5:mlx5_3/1 dst=02:4d:4c:35:00:01 count=5 done=sigint").unwrap();
        assert_eq!((p.count, p.pps, p.window, p.sigint), (5, 100_000, 256, true));
        assert_eq!(p.dst, [2, 0x4d, 0x4c, 0x35, 0, 1]);
        assert!(parse("tx=a rx=b count=1").is_err());
        assert!(parse("tx=a rx=b dst=1:2 count=1").is_err());
        let f = frame(p.dst, NUMBERED, 300);
        assert_eq!(tag(&f), Some((NUMBERED, 300)));
        assert_eq!(f.len(), 60 + 300 % 128);
        assert_ne!(frame(p.dst, NUMBERED, 301)[27..], f[27..]);
    }
}
