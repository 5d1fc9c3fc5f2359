//! One line per second and port, and the final summary, as text or JSON lines.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::cli::Config;
use crate::worker::Counters;

/// Bytes a frame takes on the wire beyond its own: FCS (4), preamble (8), inter-frame gap (12).
const L1_OVERHEAD: u64 = 24;

fn sum(counters: &[Arc<Counters>]) -> [u64; 4] {
    counters
        .iter()
        .map(|c| c.snapshot())
        .fold([0; 4], |a, s| [a[0] + s[0], a[1] + s[1], a[2] + s[2], a[3] + s[3]])
}

fn gbps(packets: u64, bytes: u64, secs: f64) -> f64 {
    (bytes + packets * L1_OVERHEAD) as f64 * 8.0 / secs / 1e9
}

pub struct Reporter {
    json: bool,
    tx_name: String,
    rx_name: Option<String>,
    epoch: Instant,
    next: Duration,
    last: ([u64; 4], [u64; 4], Duration),
}

impl Reporter {
    pub fn new(cfg: &Config, epoch: Instant) -> Reporter {
        Reporter {
            json: cfg.json,
            tx_name: cfg.tx_port.clone(),
            rx_name: cfg.rx_port.clone(),
            epoch,
            next: Duration::from_secs(1),
            last: ([0; 4], [0; 4], Duration::ZERO),
        }
    }

    /// Prints a line for each second that has passed (and, when `last`, for the final part).
    pub fn tick(&mut self, tx: &[Arc<Counters>], rx: &Counters, last: bool) {
        let now = self.epoch.elapsed();
        if now < self.next && !last {
            return;
        }
        let (t, r) = (sum(tx), rx.snapshot());
        let (pt, pr, at) = self.last;
        let secs = (now - at).as_secs_f64().max(1e-9);
        if last && now - at < Duration::from_millis(100) {
            return;
        }
        let d = |a: [u64; 4], b: [u64; 4]| [a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3]];
        let (dt, dr) = (d(t, pt), d(r, pr));
        let drops = dt[2] + dr[2];
        let errors = dt[3] + dr[3];
        // The part after the last full second is mostly the receiver's drain, often with nothing
        // in it: a line of zeros there would read as a stall. The summary has the totals.
        if last && dt.iter().chain(&dr).all(|&n| n == 0) {
            return;
        }
        if self.json {
            rawpkt::outln!(
                "{{\"type\":\"interval\",\"t\":{:.3},\"tx_packets\":{},\"tx_mpps\":{:.4},\"tx_gbps\":{:.4},\"rx_packets\":{},\"rx_mpps\":{:.4},\"rx_gbps\":{:.4},\"drops\":{},\"errors\":{}}}",
                now.as_secs_f64(),
                dt[0],
                dt[0] as f64 / secs / 1e6,
                gbps(dt[0], dt[1], secs),
                dr[0],
                dr[0] as f64 / secs / 1e6,
                gbps(dr[0], dr[1], secs),
                drops,
                errors
            );
        } else {
            let mut line = format!(
                "{:7.2}s  tx {}  {:8.3} Mpps {:7.3} Gbit/s",
                now.as_secs_f64(),
                self.tx_name,
                dt[0] as f64 / secs / 1e6,
                gbps(dt[0], dt[1], secs)
            );
            if let Some(rx) = &self.rx_name {
                line += &format!(
                    "  | rx {rx}  {:8.3} Mpps {:7.3} Gbit/s",
                    dr[0] as f64 / secs / 1e6,
                    gbps(dr[0], dr[1], secs)
                );
            }
            line += &format!("  | drops {drops} errors {errors}");
            rawpkt::outln!("{line}");
        }
        self.last = (t, r, now);
        while self.next <= now {
            self.next += Duration::from_secs(1);
        }
    }

    pub fn summary(&self, s: &Summary) {
        if self.json {
            let lat = match &s.latency {
                Some(l) => format!(
                    ",\"latency_ns\":{{\"samples\":{},\"min\":{},\"p50\":{},\"p99\":{},\"p999\":{},\"max\":{}}}",
                    l.samples, l.min, l.p50, l.p99, l.p999, l.max
                ),
                None => String::new(),
            };
            rawpkt::outln!(
                "{{\"type\":\"summary\",\"seconds\":{:.3},\"tx_packets\":{},\"tx_bytes\":{},\"tx_mpps\":{:.4},\"tx_drops\":{},\"tx_errors\":{},\"rx_packets\":{},\"rx_bytes\":{},\"rx_mpps\":{:.4},\"rx_errors\":{},\"rx_device_drops\":{},\"lost\":{}{lat}}}",
                s.seconds, s.tx[0], s.tx[1], s.tx_mpps(), s.tx[2], s.tx[3], s.rx[0], s.rx[1], s.rx_mpps(), s.rx[3], s.rx[2], s.lost()
            );
            return;
        }
        rawpkt::outln!(
            "summary: {:.2}s  tx {} packets ({:.3} Mpps, {} bytes), drops {}, errors {}",
            s.seconds,
            s.tx[0],
            s.tx_mpps(),
            s.tx[1],
            s.tx[2],
            s.tx[3]
        );
        if s.has_rx {
            rawpkt::outln!(
                "         rx {} packets ({:.3} Mpps, {} bytes), lost {}, device drops {}, errors {}",
                s.rx[0],
                s.rx_mpps(),
                s.rx[1],
                s.lost(),
                s.rx[2],
                s.rx[3]
            );
        }
        if let Some(l) = &s.latency {
            rawpkt::outln!(
                "         latency ns: min {} p50 {} p99 {} p99.9 {} max {} ({} samples)",
                l.min,
                l.p50,
                l.p99,
                l.p999,
                l.max,
                l.samples
            );
        }
    }
}

pub struct Latency {
    pub samples: u64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

pub struct Summary {
    pub seconds: f64,
    pub tx: [u64; 4],
    pub rx: [u64; 4],
    pub has_rx: bool,
    pub latency: Option<Latency>,
}

impl Summary {
    pub fn collect(
        tx: &[Arc<Counters>],
        rx: &Counters,
        tx_time: Duration,
        hist: Option<&Histogram<u64>>,
        has_rx: bool,
    ) -> Summary {
        let latency = hist.filter(|h| !h.is_empty()).map(|h| Latency {
            samples: h.len(),
            min: h.min(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        });
        Summary {
            seconds: tx_time.as_secs_f64(),
            tx: sum(tx),
            rx: rx.snapshot(),
            has_rx,
            latency,
        }
    }

    fn tx_mpps(&self) -> f64 {
        self.tx[0] as f64 / self.seconds.max(1e-9) / 1e6
    }

    fn rx_mpps(&self) -> f64 {
        self.rx[0] as f64 / self.seconds.max(1e-9) / 1e6
    }

    /// Sent and never received (only meaningful with a receive port).
    fn lost(&self) -> u64 {
        if self.has_rx {
            self.tx[0].saturating_sub(self.rx[0])
        } else {
            0
        }
    }
}
