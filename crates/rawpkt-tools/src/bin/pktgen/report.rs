//! One line per second and port, and the final summary, as text or JSON lines.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rawpkt_tools::stats::mpps;

use crate::cli::Config;
use crate::pace::LATE_NS;
use crate::worker::{Counters, Departed, StreamCounters};

/// A short stream's words: what it sent against what its rate asked, over `secs`.
fn short_text(sent: u64, asked: u64, secs: f64) -> String {
    format!(
        "sent {:.3} of the {:.3} Mpps asked ({:.1} %)",
        mpps(sent, secs),
        mpps(asked, secs),
        100.0 * sent as f64 / asked.max(1) as f64
    )
}

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

pub(crate) struct Reporter {
    json: bool,
    tx_name: String,
    rx_name: Option<String>,
    epoch: Instant,
    next: Duration,
    last: ([u64; 4], [u64; 4], Duration),
    /// Stream names, and each stream's (tx, rx, latency sum, samples) at the last line.
    names: Vec<String>,
    last_streams: Vec<[u64; 4]>,
    /// Each stream's (sent, asked by its rate) at the last line (`StreamCounters::short_since`).
    last_asked: Vec<[u64; 2]>,
}

/// Values of one stream for one interval line.
struct StreamInterval {
    tx: u64,
    rx: u64,
    /// Sent and not (yet) received, since the start: frames in flight count until they land.
    lost: u64,
    lat_mean: u64,
    lat_max: u64,
    jitter: u64,
}

fn stream_interval(c: &StreamCounters, last: &mut [u64; 4]) -> StreamInterval {
    let (tx, rx) = (c.tx_total()[0], c.rx_total()[0]);
    let (sum, n) = (
        c.lat_sum_ns.load(Ordering::Relaxed),
        c.lat_samples.load(Ordering::Relaxed),
    );
    // Saturating: a stream's sent count goes down at the end by the packets made and never
    // sent (left in a burst when the run stopped).
    let (dsum, dn) = (sum.saturating_sub(last[2]), n.saturating_sub(last[3]));
    let i = StreamInterval {
        tx: tx.saturating_sub(last[0]),
        rx: rx.saturating_sub(last[1]),
        lost: tx.saturating_sub(rx),
        lat_mean: dsum.checked_div(dn).unwrap_or(0),
        lat_max: c.lat_max_ns.swap(0, Ordering::Relaxed),
        jitter: c.jitter_ns.load(Ordering::Relaxed),
    };
    *last = [tx, rx, sum, n];
    i
}

impl Reporter {
    pub(crate) fn new(cfg: &Config, epoch: Instant, names: Vec<String>) -> Reporter {
        Reporter {
            json: cfg.json,
            tx_name: cfg.tx_port.clone(),
            rx_name: cfg.rx_port.clone(),
            epoch,
            next: Duration::from_secs(1),
            last: ([0; 4], [0; 4], Duration::ZERO),
            last_streams: vec![[0; 4]; names.len()],
            last_asked: vec![[0; 2]; names.len()],
            names,
        }
    }

    /// Prints a line for each second that has passed (and, when `last`, for the final part).
    pub(crate) fn tick(&mut self, tx: &[Arc<Counters>], rx: &Counters, streams: &[StreamCounters], last: bool) {
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
        // Streams short of their rates in this interval: (sent, asked) where so.
        let short: Vec<Option<(u64, u64)>> = streams
            .iter()
            .zip(self.last_asked.iter_mut())
            .map(|(c, l)| match c.short_since(l) {
                (sent, asked, true) => Some((sent, asked)),
                _ => None,
            })
            .collect();
        let short_names = || {
            short
                .iter()
                .zip(&self.names)
                .filter(|(s, _)| s.is_some())
                .map(|(_, n)| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(",")
        };
        // Per stream only when there are several: with one, its line is the port's.
        let per: Vec<StreamInterval> = if streams.len() > 1 {
            streams
                .iter()
                .zip(self.last_streams.iter_mut())
                .map(|(c, l)| stream_interval(c, l))
                .collect()
        } else {
            Vec::new()
        };
        if self.json {
            let mut st = String::new();
            if !per.is_empty() {
                st = per
                    .iter()
                    .zip(&self.names)
                    .map(|(i, name)| {
                        format!(
                            "{{\"name\":\"{name}\",\"tx_packets\":{},\"rx_packets\":{},\"lost\":{},\"latency_mean_ns\":{},\"latency_max_ns\":{},\"jitter_ns\":{}}}",
                            i.tx, i.rx, i.lost, i.lat_mean, i.lat_max, i.jitter
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                st = format!(",\"streams\":[{st}]");
            }
            rawpkt_sys::outln!(
                "{{\"type\":\"interval\",\"t\":{:.3},\"tx_packets\":{},\"tx_mpps\":{:.4},\"tx_gbps\":{:.4},\"rx_packets\":{},\"rx_mpps\":{:.4},\"rx_gbps\":{:.4},\"drops\":{},\"errors\":{},\"short_streams\":[{}]{st}}}",
                now.as_secs_f64(),
                dt[0],
                mpps(dt[0], secs),
                gbps(dt[0], dt[1], secs),
                dr[0],
                mpps(dr[0], secs),
                gbps(dr[0], dr[1], secs),
                drops,
                errors,
                short_names()
            );
        } else {
            let mut line = format!(
                "{:7.2}s  tx {}  {:8.3} Mpps {:7.3} Gbit/s",
                now.as_secs_f64(),
                self.tx_name,
                mpps(dt[0], secs),
                gbps(dt[0], dt[1], secs)
            );
            if let Some(rx) = &self.rx_name {
                line += &format!(
                    "  | rx {rx}  {:8.3} Mpps {:7.3} Gbit/s",
                    mpps(dr[0], secs),
                    gbps(dr[0], dr[1], secs)
                );
            }
            line += &format!("  | drops {drops} errors {errors}");
            if let (true, Some((sent, asked))) = (per.is_empty(), short.first().copied().flatten()) {
                line += &format!("  | SHORT of its rate: {}", short_text(sent, asked, secs));
            }
            for ((i, name), sh) in per.iter().zip(&self.names).zip(&short) {
                line += &format!(
                    "\n          {name:>10}  tx {:8.3} Mpps  rx {:8.3} Mpps  lost {}",
                    mpps(i.tx, secs),
                    mpps(i.rx, secs),
                    i.lost
                );
                if i.rx > 0 {
                    line += &format!(
                        "  latency mean {:.1} max {:.1} jitter {:.1} µs",
                        i.lat_mean as f64 / 1e3,
                        i.lat_max as f64 / 1e3,
                        i.jitter as f64 / 1e3
                    );
                }
                if let Some((sent, asked)) = sh {
                    line += &format!("  SHORT of its rate: {}", short_text(*sent, *asked, secs));
                }
            }
            rawpkt_sys::outln!("{line}");
        }
        self.last = (t, r, now);
        while self.next <= now {
            self.next += Duration::from_secs(1);
        }
    }

    pub(crate) fn summary(&self, s: &Summary) {
        if self.json {
            let lat = match &s.latency {
                Some(l) => format!(",\"latency_clock\":\"{}\",\"latency_ns\":{}", s.clock, l.json()),
                None => String::new(),
            };
            let streams: Vec<String> = s
                .streams
                .iter()
                .map(|t| {
                    format!(
                        "{{\"name\":\"{}\",\"latency_stream\":{},\"rate_asked_packets\":{},\"short\":{},\"tx_packets\":{},\"tx_bytes\":{},\"tx_mpps\":{:.4},\"rx_packets\":{},\"rx_bytes\":{},\"lost\":{}{}{}}}",
                        t.name,
                        t.latency_stream,
                        t.asked,
                        t.short,
                        t.tx[0],
                        t.tx[1],
                        mpps(t.tx[0], s.seconds),
                        t.rx[0],
                        t.rx[1],
                        t.tx[0].saturating_sub(t.rx[0]),
                        t.latency.as_ref().map_or(String::new(), |l| format!(",\"latency_ns\":{}", l.json())),
                        t.departures
                            .as_ref()
                            .map_or(String::new(), |d| format!(",\"departures_ns\":{}", d.json()))
                    )
                })
                .collect();
            let metrics = s.metrics.map_or(String::new(), |a| format!(",\"metrics\":\"{a}\""));
            let lat = format!("{metrics}{lat},\"streams\":[{}]", streams.join(","));
            rawpkt_sys::outln!(
                "{{\"type\":\"summary\",\"seconds\":{:.3},\"tx_packets\":{},\"tx_bytes\":{},\"tx_mpps\":{:.4},\"tx_drops\":{},\"tx_errors\":{},\"rx_packets\":{},\"rx_bytes\":{},\"rx_mpps\":{:.4},\"rx_errors\":{},\"rx_device_drops\":{},\"lost\":{},\"send_queues_per_core\":{}{lat}}}",
                s.seconds, s.tx[0], s.tx[1], s.tx_mpps(), s.tx[2], s.tx[3], s.rx[0], s.rx[1], s.rx_mpps(), s.rx[3], s.rx[2], s.lost(), s.send_queues_per_core
            );
            return;
        }
        rawpkt_sys::outln!(
            "summary: {:.2}s  tx {} packets ({:.3} Mpps, {} bytes), drops {}, errors {}",
            s.seconds,
            s.tx[0],
            s.tx_mpps(),
            s.tx[1],
            s.tx[2],
            s.tx[3]
        );
        if s.has_rx {
            rawpkt_sys::outln!(
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
            rawpkt_sys::outln!(
                "         latency ns ({} clock): min {} p50 {} p99 {} p99.9 {} max {} ({} samples)",
                s.clock,
                l.min,
                l.p50,
                l.p99,
                l.p999,
                l.max,
                l.samples
            );
        }
        if let [t] = &s.streams[..] {
            if t.short {
                rawpkt_sys::outln!(
                    "         SHORT of its rate: {}",
                    short_text(t.tx[0], t.asked, s.seconds)
                );
            }
        }
        if s.streams.len() > 1 {
            for t in &s.streams {
                let mut line = format!(
                    "  stream {}: tx {} packets ({:.3} Mpps, {} bytes)",
                    t.name,
                    t.tx[0],
                    mpps(t.tx[0], s.seconds),
                    t.tx[1]
                );
                if s.has_rx {
                    line += &format!(", rx {} packets, lost {}", t.rx[0], t.tx[0].saturating_sub(t.rx[0]));
                }
                if let Some(l) = &t.latency {
                    line += &format!(
                        "; latency ns: min {} p50 {} p99 {} p99.9 {} max {}, jitter {}",
                        l.min, l.p50, l.p99, l.p999, l.max, l.jitter
                    );
                }
                if let Some(d) = &t.departures {
                    line += &format!("; {}", d.text());
                }
                if t.short {
                    line += &format!("; SHORT of its rate: {}", short_text(t.tx[0], t.asked, s.seconds));
                }
                rawpkt_sys::outln!("{line}");
            }
        } else if let Some(d) = s.streams.first().and_then(|t| t.departures.as_ref()) {
            rawpkt_sys::outln!("         {}", d.text());
        }
    }
}

impl Latency {
    fn of(h: &Histogram<u64>, jitter: u64) -> Option<Latency> {
        (!h.is_empty()).then(|| Latency {
            samples: h.len(),
            min: h.min(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
            jitter,
            // Buckets doubling from 1 µs: counts of samples at most each bound.
            buckets: h
                .iter_log(1000, 2.0)
                .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
                .filter(|&(_, n)| n > 0)
                .collect(),
        })
    }

    fn json(&self) -> String {
        let buckets: Vec<String> = self.buckets.iter().map(|(le, n)| format!("[{le},{n}]")).collect();
        format!(
            "{{\"samples\":{},\"min\":{},\"p50\":{},\"p99\":{},\"p999\":{},\"max\":{},\"jitter\":{},\"histogram\":[{}]}}",
            self.samples,
            self.min,
            self.p50,
            self.p99,
            self.p999,
            self.max,
            self.jitter,
            buckets.join(",")
        )
    }
}

pub(crate) struct Latency {
    pub samples: u64,
    pub min: u64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
    /// RFC 3550 interarrival jitter at the end, ns (0 where it does not apply).
    pub jitter: u64,
    /// (upper bound in ns, samples in the bucket), doubling from 1 µs, empty buckets left out.
    pub buckets: Vec<(u64, u64)>,
}

pub(crate) struct StreamSummary {
    pub name: String,
    pub latency_stream: bool,
    /// Packets the stream's rate asked for over the run (0 without a rate), and whether it
    /// sent more than 1 % fewer (`pace::short`).
    pub asked: u64,
    pub short: bool,
    pub tx: [u64; 2],
    pub rx: [u64; 2],
    pub latency: Option<Latency>,
    pub departures: Option<Departures>,
}

/// Inter-departure times of a shaped stream, from the send stamps the receiver read.
pub(crate) struct Departures {
    pub gaps: u64,
    pub mean: f64,
    /// Coefficient of variation: standard deviation / mean (1 for exponential gaps).
    pub cv: f64,
    pub p50: u64,
    pub p99: u64,
    /// Gaps longer than [`STALL_GAPS`] mean gaps: the sender lost its CPU (a shared machine
    /// stalls a thread for 1-30 ms), not the shape's spread; counted here and left out of
    /// `cv_without_stalls` (and of its mean), so that one stall, which the coefficient squares,
    /// does not hide the shape.
    pub stalls: u64,
    pub cv_without_stalls: f64,
    /// The sender's side, for departures with due times (Poisson, timed replay).
    pub timing: Option<Timing>,
}

/// How the departures kept their due times, as the transmit cores saw them.
pub(crate) struct Timing {
    pub departures: u64,
    /// Departures that left more than [`LATE_NS`] after their due time.
    pub late: u64,
    /// Departures that left early, with the send before them, and the most any did, ns.
    pub early: u64,
    pub early_max: u64,
    pub lateness_p50: u64,
    pub lateness_p99: u64,
    pub lateness_max: u64,
    /// Gaps between consecutive departures (of one core) that both left on time: their count,
    /// mean and coefficient of variation.
    pub on_time_gaps: u64,
    pub mean_on_time: f64,
    pub cv_on_time: f64,
}

impl Timing {
    /// Leaving out the gaps with a late end does not bias the spread of those kept when the
    /// lateness comes from the host: a departure is late when something held the loop across
    /// its due time (an interrupt, another thread on the CPU), at times that do not depend on
    /// the gaps the pacer drew, so whether a gap is kept does not depend on its length. The
    /// exception is a gap whose start was on time and whose end fell in a hold that began
    /// between them: left out with probability (holds a second) x (its length), 5e-4 for a
    /// 1 µs gap at the VM's ~540 interrupts a second, which moves the coefficient by about that
    /// much. Measured (throwaway trace of every departure, SCHED_FIFO, load 4-7): the due gaps
    /// of the pairs kept had a coefficient of 1.0005-1.0051 against 1.0021-1.0025 over all.
    /// Lateness of the loop's own making is not independent: a receive poll only starts before
    /// a gap longer than its slack, so its overruns take long gaps out (a capture's writes in
    /// those polls took the kept mean 3.4 % low); hence the loop keeps its polls within the
    /// slack. What is left out is counted (`late`) and shown in `cv` over all gaps.
    fn of(d: &Departed) -> Timing {
        let g = &d.on_time_gaps;
        Timing {
            departures: d.departures,
            late: d.late,
            early: d.early,
            early_max: d.early_max,
            lateness_p50: d.lateness.value_at_quantile(0.5),
            lateness_p99: d.lateness.value_at_quantile(0.99),
            lateness_max: d.lateness.max(),
            on_time_gaps: g.len(),
            mean_on_time: g.mean(),
            cv_on_time: g.stdev() / g.mean().max(1e-9),
        }
    }
}

/// A gap this many times the mean counts as a stall: an exponential gap is that long with
/// probability e^-50, about 2e-22.
pub(crate) const STALL_GAPS: f64 = 50.0;

impl Departures {
    fn of(g: &Histogram<u64>, sent: Option<&Departed>) -> Departures {
        let mean = g.mean();
        let limit = (STALL_GAPS * mean) as u64;
        // Count, sum and sum of squares of the gaps up to the limit.
        let (mut n, mut sum, mut sq) = (0u64, 0f64, 0f64);
        for v in g.iter_recorded() {
            let (x, c) = (v.value_iterated_to(), v.count_at_value());
            if x <= limit {
                n += c;
                sum += x as f64 * c as f64;
                sq += (x as f64).powi(2) * c as f64;
            }
        }
        let m = sum / n.max(1) as f64;
        let sd = (sq / n.max(1) as f64 - m * m).max(0.0).sqrt();
        Departures {
            gaps: g.len(),
            mean,
            cv: g.stdev() / mean.max(1e-9),
            p50: g.value_at_quantile(0.5),
            p99: g.value_at_quantile(0.99),
            stalls: g.len() - n,
            cv_without_stalls: sd / m.max(1e-9),
            timing: sent.filter(|d| d.departures > 0).map(Timing::of),
        }
    }

    fn json(&self) -> String {
        let timing = self.timing.as_ref().map_or(String::new(), |t| {
            format!(
                ",\"departures\":{},\"late\":{},\"late_after_ns\":{LATE_NS},\"early\":{},\"early_max\":{},\"lateness_p50\":{},\"lateness_p99\":{},\"lateness_max\":{},\"on_time_gaps\":{},\"mean_on_time\":{:.1},\"cv_on_time\":{:.4}",
                t.departures, t.late, t.early, t.early_max, t.lateness_p50, t.lateness_p99, t.lateness_max, t.on_time_gaps, t.mean_on_time, t.cv_on_time
            )
        });
        format!(
            "{{\"gaps\":{},\"mean\":{:.1},\"cv\":{:.4},\"p50\":{},\"p99\":{},\"stalls\":{},\"cv_without_stalls\":{:.4}{timing}}}",
            self.gaps, self.mean, self.cv, self.p50, self.p99, self.stalls, self.cv_without_stalls
        )
    }

    /// The summary's words for these departures.
    fn text(&self) -> String {
        let mut line = format!(
            "gaps between departures ns: mean {:.1} cv {:.3} p50 {} p99 {}, {} stalls (cv {:.3} without)",
            self.mean, self.cv, self.p50, self.p99, self.stalls, self.cv_without_stalls
        );
        if let Some(t) = &self.timing {
            line += &format!(
                "; {} of {} late (> {} µs after due; lateness ns p50 {} p99 {} max {}), {} early (with the send before; at most {} ns), on-time gaps mean {:.1} cv {:.3}",
                t.late,
                t.departures,
                LATE_NS / 1000,
                t.lateness_p50,
                t.lateness_p99,
                t.lateness_max,
                t.early,
                t.early_max,
                t.mean_on_time,
                t.cv_on_time
            );
        }
        line
    }
}

pub(crate) struct Summary {
    pub seconds: f64,
    pub tx: [u64; 4],
    pub rx: [u64; 4],
    pub has_rx: bool,
    /// Of every stamped frame, all streams together.
    pub latency: Option<Latency>,
    pub streams: Vec<StreamSummary>,
    /// The clock the stamps and latencies were read on: "software" (the run's monotonic clock)
    /// or "device" (the NIC's, --hw-timestamps).
    pub clock: &'static str,
    /// Send queues each transmit core sent on (`sendq::per_core`).
    pub send_queues_per_core: u16,
    /// Where the metrics endpoint served (--metrics; the port the system chose for port 0).
    pub metrics: Option<std::net::SocketAddr>,
}

impl Summary {
    pub(crate) fn collect(
        tx: &[Arc<Counters>],
        rx: &Counters,
        tx_time: Duration,
        streams: (&[crate::stream::Stream], &[StreamCounters]),
        hists: Option<&[crate::worker::RxHists]>,
        departed: &[Option<Departed>],
        has_rx: bool,
    ) -> Summary {
        let all = hists.and_then(|hs| {
            let mut all = hs.first()?.latency.clone();
            all.reset();
            for h in hs {
                all.add(&h.latency).ok()?;
            }
            Some(all)
        });
        let latency = all.as_ref().and_then(|h| Latency::of(h, 0));
        let streams = streams
            .0
            .iter()
            .zip(streams.1)
            .enumerate()
            .map(|(i, (s, c))| StreamSummary {
                name: s.spec.name.clone(),
                latency_stream: s.spec.latency,
                asked: c.owed_total(),
                short: c.short_since(&mut [0, 0]).2,
                tx: c.tx_total(),
                // A replay is the run's one stream, its frames unstamped: what the port got.
                rx: if s.traffic.stamped() {
                    c.rx_total()
                } else {
                    [rx.snapshot()[0], rx.snapshot()[1]]
                },
                latency: hists
                    .and_then(|h| h.get(i))
                    .and_then(|h| Latency::of(&h.latency, c.jitter_ns.load(Ordering::Relaxed))),
                departures: hists
                    .and_then(|h| h.get(i)?.gaps.as_ref())
                    .filter(|g| !g.is_empty())
                    .map(|g| Departures::of(g, departed.get(i).and_then(Option::as_ref))),
            })
            .collect();
        Summary {
            seconds: tx_time.as_secs_f64(),
            tx: sum(tx),
            rx: rx.snapshot(),
            has_rx,
            latency,
            streams,
            clock: "software",
            send_queues_per_core: 1,
            metrics: None,
        }
    }

    fn tx_mpps(&self) -> f64 {
        mpps(self.tx[0], self.seconds)
    }

    fn rx_mpps(&self) -> f64 {
        mpps(self.rx[0], self.seconds)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stall is counted apart and left out of the coefficient it would dominate: a steady
    /// 1 µs stream with one 10 ms gap has a coefficient of 10, and of 0 without the stall.
    #[test]
    fn a_stall_is_counted_apart_from_the_spread() {
        let mut g = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        g.record_n(1000, 9999).unwrap();
        g.record(10_000_000).unwrap();
        let d = Departures::of(&g, None);
        assert_eq!((d.gaps, d.stalls), (10_000, 1));
        assert!(d.cv > 9.0, "{}", d.cv);
        assert!(d.cv_without_stalls < 1e-6, "{}", d.cv_without_stalls);
        // Exponential-like spread without stalls keeps its coefficient: gaps 0..=4000 ns
        // spread evenly have a coefficient of 1/sqrt(3).
        let mut u = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for x in 1..=4000u64 {
            u.record(x).unwrap();
        }
        let d = Departures::of(&u, None);
        assert_eq!(d.stalls, 0);
        assert!(
            (d.cv_without_stalls - d.cv).abs() < 1e-3 && (d.cv - 0.577).abs() < 0.01,
            "{}",
            d.cv
        );
    }
}
