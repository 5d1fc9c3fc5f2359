//! pktgen: the engine's traffic generator. Opens ports through the public API only, runs one
//! pinned transmit loop per core and a receiver, prints a line per second and a summary.
// A binary exports nothing: its modules' items are `pub(crate)`, so dead code shows.
#![warn(unreachable_pub)]

mod cli;
mod control;
mod http;
mod metrics;
mod pace;
mod rate;
mod report;
mod search;
mod sendq;
mod seq;
mod stream;
mod template;
mod traffic;
mod worker;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cli::Config;
// `crate::fail::Fail` for the modules; the rule is the tools' (`rawpkt_tools::fail`).
use rawpkt::Port;
use rawpkt_tools::{self as tool, fail, Fail};
use report::{Reporter, Summary};
use stream::{Stream, StreamSpec};
use traffic::Traffic;
use worker::{Counters, StreamCounters, TxPlan};

fn main() -> ExitCode {
    // First of all, so that Ctrl-C at any time stops the run in order and prints the summary:
    // opening ports takes tens of milliseconds, and a signal before the handler kills pktgen.
    let stop = rawpkt_sys::signal::stop_flag();
    tool::log::init();
    let args: cli::Args = match tool::parse("pktgen") {
        Ok(a) => a,
        Err(code) => return code,
    };
    let run = if args.search {
        search_run(&args)
    } else {
        Config::from_args(args)
            .map_err(Fail::Usage)
            .and_then(|cfg| run(cfg, stop))
    };
    // A closed stdout (`pktgen | head -1`) stopped the run like Ctrl-C.
    tool::finish("pktgen", run)
}

/// `--search`: checked here, trials run by `search`, each one pktgen with the options given.
fn search_run(args: &cli::Args) -> Result<(), Fail> {
    let s = search::Search::parse(
        args.search_sizes.as_deref().unwrap_or(search::RFC2544_SIZES),
        args.trial.unwrap_or(2.0),
        args.resolution.as_deref().unwrap_or("1%"),
        args.loss_threshold.unwrap_or(search::PDR_LOSS_PCT),
    )
    .map_err(Fail::Usage)?;
    if args.port.len() > 1 || args.rx_port.len() > 1 || args.bidir {
        return Err(Fail::Usage(
            "--search measures one direction: one --port and --rx-port, without --bidir".into(),
        ));
    }
    if !args.port.is_empty() && args.rx_port.is_empty() {
        return Err(Fail::Usage("--search needs --rx-port to count what arrives".into()));
    }
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let name = |a: &str| a.split('=').next().unwrap_or("").to_string();
    if let Some(a) = raw.iter().find(|a| search::TRIAL_OPTIONS.contains(&name(a).as_str())) {
        return Err(Fail::Usage(format!("--search sets {} itself for each trial", name(a))));
    }
    // The user's options, without the search's own: each trial is pktgen with them.
    // (--json says how the search reports; every trial reports in JSON.)
    let own = [
        "--search",
        "--search-sizes",
        "--trial",
        "--resolution",
        "--loss-threshold",
        "--json",
    ];
    let mut base = Vec::new();
    let mut it = raw.iter();
    while let Some(a) = it.next() {
        let n = name(a);
        if own.contains(&n.as_str()) {
            if n != "--search" && n != "--json" && !a.contains('=') {
                it.next();
            }
            continue;
        }
        base.push(a.clone());
    }
    search::run(&s, &base, args.json)
}

/// One direction of a run: a sending port, its receiving port, its streams, cores and counters.
struct Dir {
    /// The run's configuration with this direction's ports as `tx_port`, `rx_port`.
    cfg: Config,
    tx_port: Arc<Port>,
    rx_port: Option<Arc<Port>>,
    dst_mac: [u8; 6],
    streams: Arc<Vec<Stream>>,
    queues_per_core: u16,
    latency_queue: Option<u16>,
    per_stream: Arc<Vec<StreamCounters>>,
    tx_done: Arc<AtomicBool>,
    tx_counters: Vec<Arc<Counters>>,
    rx_counters: Arc<Counters>,
    rx_ready: Arc<AtomicBool>,
}

/// Opens `spec` once for the whole run: a port that sends one way and receives the other is one
/// open port.
fn open_port(
    opened: &mut Vec<(String, Arc<Port>)>,
    spec: &str,
    opts: &rawpkt::PortOptions,
    what: &str,
) -> Result<Arc<Port>, Fail> {
    if let Some((_, p)) = opened.iter().find(|(s, _)| s == spec) {
        return Ok(p.clone());
    }
    let p = Arc::new(
        rawpkt_tools::env::open_with(spec, opts)
            .map_err(|e| Fail::rawpkt(format_args!("{what} {}", rawpkt_wire::text::echo(spec)), e))?,
    );
    opened.push((spec.to_string(), p.clone()));
    Ok(p)
}

/// How long `--gateway` waits for the neighbour to answer.
const GATEWAY_WAIT: Duration = Duration::from_secs(3);

fn run(cfg: Config, stop: &'static AtomicBool) -> Result<(), Fail> {
    // A file to replay is read and checked before any port is touched.
    let mut replay = match &cfg.pcap {
        Some(path) => Some(traffic::replay_file(path)?),
        None => None,
    };
    // So is a stream file.
    let mut specs = match &cfg.streams {
        Some(path) => stream::read_file(path, &cfg)?,
        None => vec![StreamSpec::from_config(&cfg)],
    };
    if let Some(r) = cfg.latency_rate {
        if specs.len() == stream::MAX_STREAMS {
            return Err(Fail::Usage(format!(
                "{} streams and the latency stream are more than {} (--latency-rate off leaves it out)",
                specs.len(),
                stream::MAX_STREAMS
            )));
        }
        specs.push(StreamSpec::latency(&cfg, r));
    }
    let cpus = rawpkt_tools::cpu::allowed();
    let all_cores = cfg.cores * cfg.directions.len();
    let model_tx = cfg.directions.iter().any(|d| d.0.starts_with("model:"));
    // The model NIC polls on a CPU of its own when there is one to spare (the last).
    if model_tx && std::env::var_os("RAWPKT_MODEL_CPU").is_none() && cpus.len() > all_cores {
        if let Some(last) = cpus.last() {
            std::env::set_var("RAWPKT_MODEL_CPU", last.to_string());
        }
    }
    // The receiving ports' default rules take UDP (and the experimental EtherTypes) to their
    // MAC, which every stream but a GRE one is; GRE frames (IP protocol 47, which a verbs flow
    // cannot name) need the whole MAC on an mlx5: port. (An xdp: port's rule= options say what
    // it takes.) A port that only sends installs no rules: one set of options opens them all.
    let gre = specs.iter().any(|s| s.headers.encap == template::Encap::Gre);
    let opts = rawpkt::PortOptions::default().default_rules(if gre {
        rawpkt::DefaultRules::WholeMac
    } else {
        rawpkt::DefaultRules::default()
    });
    let several = cfg.directions.len() > 1;
    let mut opened = Vec::new();
    let mut dirs: Vec<Dir> = Vec::new();
    for (tx_spec, rx_spec) in &cfg.directions {
        let tx_port = open_port(&mut opened, tx_spec, &opts, "--port")?;
        let rx_port = match rx_spec {
            Some(spec) => Some(open_port(&mut opened, spec, &opts, "--rx-port")?),
            None => None,
        };
        // A port's frames leave on its wire: the same port as receiver would count every one lost.
        if let Some(rx) = rx_port.as_ref().filter(|rx| rx.same_port(&tx_port)) {
            return Err(Fail::Usage(format!(
                "--port and --rx-port are the same port ({}); receive on the port at the other end of the wire",
                rx.identity()
            )));
        }
        // Each port sends in one direction and receives in one at most: two directions' cores
        // on one port would take the same send queues, two receivers the same receive queues.
        for d in &dirs {
            let twice = if d.tx_port.same_port(&tx_port) {
                Some(("sends", tx_port.identity()))
            } else {
                match (&d.rx_port, &rx_port) {
                    (Some(a), Some(b)) if a.same_port(b) => Some(("receives", b.identity())),
                    _ => None,
                }
            };
            if let Some((what, id)) = twice {
                return Err(Fail::Usage(format!(
                    "{id} {what} in two directions; each port sends in one and receives in one at most"
                )));
            }
            // An AF_XDP queue is one socket: the sender's and the receiver's halves of it would
            // have to come from one `Port::queue_pair` on one thread.
            let xdp_both = [(&d.tx_port, &rx_port), (&tx_port, &d.rx_port)]
                .into_iter()
                .find_map(|(t, r)| r.as_ref().filter(|r| r.same_port(t)).map(|_| t))
                .filter(|p| matches!(p.identity(), rawpkt::PortIdentity::Xdp { .. }));
            if let Some(p) = xdp_both {
                return Err(Fail::Usage(format!(
                    "{}: an xdp: port both sending and receiving is not supported yet (each of its queues is one \
                     socket, which the sender and the receiver would share); use one direction per xdp: port",
                    rawpkt_wire::text::echo(p.spec())
                )));
            }
        }
        let mut dcfg = cfg.clone();
        (dcfg.tx_port, dcfg.rx_port) = (tx_spec.clone(), rx_spec.clone());
        dirs.push(Dir {
            cfg: dcfg,
            tx_port,
            rx_port,
            dst_mac: cli::DEFAULT_DST_MAC,
            streams: Arc::new(Vec::new()),
            queues_per_core: 1,
            latency_queue: None,
            per_stream: Arc::new(Vec::new()),
            tx_done: Arc::new(AtomicBool::new(false)),
            tx_counters: (0..cfg.cores).map(|_| Arc::new(Counters::default())).collect(),
            rx_counters: Arc::new(Counters::default()),
            rx_ready: Arc::new(AtomicBool::new(false)),
        });
    }
    for d in &mut dirs {
        let (tx_port, rx_port) = (&d.tx_port, &d.rx_port);
        // Receive modes are the mlx5 Direct Verbs datapath's (and the model's, which runs it): an
        // AF_XDP or plain verbs queue would take the fields and receive as it always does.
        if let Some(rx) = rx_port.as_ref().filter(|_| cfg.rx_mode_asked) {
            let spec = d.cfg.rx_port.as_deref().unwrap_or_default();
            if matches!(rx.identity(), rawpkt::PortIdentity::Xdp { .. }) || spec.starts_with("verbs:") {
                return Err(Fail::Usage(format!(
                    "--rx-mode {}: {} has no receive modes (they are the mlx5 Direct Verbs datapath's: mlx5: and model: ports)",
                    cfg.rx_queue.rx_mode(),
                    rawpkt_wire::text::echo(spec)
                )));
            }
        }
        // Device stamps compare two readings of one clock: a pair of clocks would differ by their
        // offset, however well each keeps time.
        if cfg.hw_timestamps {
            let rx = rx_port.as_ref().expect("Config: --hw-timestamps has a receive port");
            if !tx_port.shares_device_clock(rx) {
                return Err(Fail::Usage(format!(
                    "--hw-timestamps: {} and {} are not on one device clock (ports of one model NIC or one mlx5 device, Direct Verbs datapath)",
                    tx_port.identity(),
                    rx.identity()
                )));
            }
        }
        // Frames go to --dst-mac, else to the gateway's MAC (L3 mode), else to the receive
        // port's own address: a NIC port (mlx5:, xdp:) takes only what is addressed to it.
        d.dst_mac = match (cfg.dst_mac, cfg.gateway) {
            (Some(m), _) => m,
            (None, Some(gw)) => {
                let m = tx_port
                    .neighbour_mac(gw, GATEWAY_WAIT)
                    .map_err(|e| Fail::rawpkt(format_args!("--gateway {gw}"), e))?;
                rawpkt_sys::errln!(
                    "pktgen: --gateway {gw}: {} sends to {}",
                    rawpkt_wire::text::echo(tx_port.spec()),
                    rawpkt_wire::rule::MacText(m)
                );
                m
            }
            (None, None) => rx_port.as_ref().and_then(|p| p.mac()).unwrap_or(cli::DEFAULT_DST_MAC),
        };
    }
    // `Config` has made sure a capture has a receive port (and one direction).
    let mut capture = match &cfg.capture {
        Some(path) => {
            Some(rawpkt_tools::pcap::Writer::create(path).map_err(|e| Fail::Runtime(format!("--capture {e}")))?)
        }
        None => None,
    };
    for d in &mut dirs {
        let mut specs = specs.clone();
        if let Some(t) = &replay {
            let load = &mut specs[0];
            load.name = "pcap".into();
            if let Some(x) = cfg.pcap_speed {
                load.shape = stream::Shape::Timed(x);
            }
            if let Some(n) = cfg.pcap_loops {
                load.count = Some(n.saturating_mul(t.times.len() as u64));
            }
        }
        let mut streams: Vec<Stream> = specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let traffic = match replay.take().filter(|_| !spec.latency) {
                    Some(t) => t,
                    None => Traffic::generated(&spec, i as u8, cfg.src_mac, d.dst_mac),
                };
                Stream { spec, traffic }
            })
            .collect();
        // Bit rates and percentages of the line rate, in packets per second of these frames.
        let link = d.tx_port.link_speed_mbps().map(|m| m as f64 * 1e6);
        for s in &mut streams {
            let Some(given) = s.spec.rate_given.filter(|r| r.as_pps().is_none()) else {
                continue;
            };
            let what = if cfg.streams.is_some() {
                format!("stream {}: rate", s.spec.name)
            } else {
                "--rate".to_string()
            };
            let len = s.traffic.mean_len();
            let pps = given.pps(len, link).map_err(|e| {
                Fail::Usage(format!(
                    "{what} {}: {}: {e}",
                    given.text(),
                    rawpkt_wire::text::echo(d.tx_port.spec())
                ))
            })?;
            rawpkt_sys::errln!(
                "pktgen: {what} {}{} is {pps:.0} packets per second of {len:.1}-byte frames on {}",
                given.text(),
                link.filter(|_| given.needs_link())
                    .map_or(String::new(), |l| format!(" (of {} Gbit/s)", l / 1e9)),
                rawpkt_wire::text::echo(d.tx_port.spec())
            );
            s.spec.rate = Some(pps);
        }
        // Template tags unique over the run (see `traffic::Held`).
        let mut base = 0u32;
        for s in &mut streams {
            s.traffic.tag_base = base;
            base += s.traffic.templates() as u32;
        }
        d.streams = Arc::new(streams);
        // Send queues per core: as asked, else what the load's rate per core needs of the device.
        let load_rate = d
            .streams
            .iter()
            .filter(|s| !s.spec.latency)
            .try_fold(0.0, |sum, s| s.spec.rate.map(|r| sum + r));
        let (queues_per_core, said) = sendq::per_core(
            cfg.queues_per_core,
            load_rate.map(|r| r / cfg.cores as f64),
            sendq::ceiling(&d.tx_port),
            d.tx_port.spec(),
        );
        if let Some(line) = said {
            rawpkt_sys::errln!("{line}");
        }
        d.queues_per_core = queues_per_core;
        d.latency_queue = send_queues(
            &cfg,
            &d.tx_port,
            queues_per_core,
            d.streams.iter().any(|s| s.spec.latency),
        )?;
        d.per_stream = Arc::new(
            d.streams
                .iter()
                // The latency stream is the first core's alone (numbered by it alone).
                .map(|s| {
                    StreamCounters::new(
                        if s.spec.latency { 1 } else { cfg.cores },
                        s.spec.shape != stream::Shape::Constant,
                    )
                })
                .collect(),
        );
    }

    let mut metrics_at = None;
    if let Some(addr) = cfg.metrics {
        let bound = metrics::serve(
            addr,
            dirs.iter()
                .map(|d| metrics::Sources {
                    tx_port: d.cfg.tx_port.clone(),
                    rx_port: d.cfg.rx_port.clone(),
                    tx: d.tx_counters.clone(),
                    rx: d.rx_counters.clone(),
                    names: d.streams.iter().map(|s| s.spec.name.clone()).collect(),
                    streams: d.per_stream.clone(),
                })
                .collect(),
        )
        .map_err(Fail::Runtime)?;
        // The port the system chose, when port 0 asked it to: nobody could scrape it otherwise.
        if addr.port() == 0 {
            rawpkt_sys::errln!("pktgen: metrics at http://{bound}/metrics");
        }
        metrics_at = Some(bound);
    }
    let started = std::time::SystemTime::now();
    let epoch = Instant::now();
    // Live control: each stream's settings, read by its pacers once per burst.
    // `Config` has made sure there is one direction when there is control.
    let controls: Vec<Arc<control::StreamControl>> = match cfg.control {
        Some(_) => dirs[0]
            .streams
            .iter()
            .map(|s| {
                Arc::new(control::StreamControl::new(
                    s.spec.rate,
                    !matches!(s.spec.shape, stream::Shape::Timed(_)),
                ))
            })
            .collect(),
        None => Vec::new(),
    };
    let events = Arc::new(control::Events::default());
    if let Some(addr) = cfg.control {
        let bound = control::serve(
            addr,
            control::Sources {
                epoch,
                names: dirs[0].streams.iter().map(|s| s.spec.name.clone()).collect(),
                controls: controls.clone(),
                streams: dirs[0].per_stream.clone(),
                events: events.clone(),
            },
        )
        .map_err(Fail::Runtime)?;
        if addr.port() == 0 {
            rawpkt_sys::errln!("pktgen: control at http://{bound}/");
        }
    }
    let deadline = cfg.duration.map(|d| epoch + Duration::from_secs_f64(d));

    // CPUs: one per transmit core, one for a model NIC's own loop, one per receiver. When the
    // receivers have none to themselves each runs inside its direction's first transmit core's
    // loop: a spinning thread sharing a CPU with the device model would starve it.
    let model_cpus = usize::from(model_tx);
    let receivers = dirs.iter().filter(|d| d.rx_port.is_some()).count();
    if !cpus.is_empty() && all_cores + model_cpus > cpus.len() {
        let fits = (cpus.len() - model_cpus) / cfg.directions.len();
        rawpkt_sys::errln!(
            "pktgen: warning: {} transmit loop{}{} and the model NIC's thread spin on {} CPUs: they take turns, and \
             the counts will show frames lost to scheduling, not to the datapath{}",
            all_cores,
            if all_cores == 1 { "" } else { "s" },
            if receivers > 0 {
                if receivers == 1 {
                    " (one with the receiver in it)"
                } else {
                    " (some with a receiver in them)"
                }
            } else {
                ""
            },
            cpus.len(),
            if fits > 0 {
                format!("; --cores {fits} gives each its own CPU")
            } else {
                String::new()
            }
        );
    }
    let own_thread = cpus.len() >= all_cores + model_cpus + receivers.max(1);
    let mut running = Vec::new();
    for (di, d) in dirs.iter().enumerate() {
        let rx_plan = d.rx_port.clone().map(|port| worker::RxPlan {
            port,
            capture: capture.take(),
            counters: d.rx_counters.clone(),
            streams: d.per_stream.clone(),
            stamps: d.streams.iter().all(|s| s.traffic.stamped()),
            epoch,
            hw_clock: cfg.hw_timestamps,
            rx_queue: cfg.rx_queue.clone(),
            // What was sent is known for sure when the receiver drains: on its own thread after
            // every core has ended, in the loop of the one core there is after that core's sends.
            sent: (own_thread || cfg.cores == 1).then(|| d.tx_counters.clone()),
        });
        let (rx_thread, mut inline_rx) = match rx_plan {
            Some(plan) if own_thread => {
                let (done, ready) = (d.tx_done.clone(), d.rx_ready.clone());
                (
                    Some(std::thread::spawn(move || {
                        // A receiver that panics stops the senders (the guard is forgotten on return).
                        let on_panic = rawpkt_sys::signal::SetOnDrop(stop);
                        let r = worker::receive(plan, &done, &ready);
                        std::mem::forget(on_panic);
                        r
                    })),
                    None,
                )
            }
            plan => {
                // No receiver, or one in the first core's loop, which says when its queues exist
                // (the cores wait for it).
                if plan.is_none() {
                    d.rx_ready.store(true, Ordering::Release);
                }
                (None, plan)
            }
        };
        // The receive queues must exist before the first frame arrives: a frame steered to a queue
        // with no socket yet is lost. However long that takes; a receiver that failed says it is
        // done too, and one that panicked ends its thread.
        while !d.rx_ready.load(Ordering::Acquire)
            && inline_rx.is_none()
            && !rx_thread.as_ref().is_some_and(|t| t.is_finished())
            && !stop.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        let tx_threads: Vec<_> = (0..cfg.cores)
            .map(|core| {
                let plan = TxPlan {
                    core,
                    cores: cfg.cores,
                    cpu: cpus.get(di * cfg.cores + core).copied(),
                    queues: d.queues_per_core,
                    burst: cfg.burst,
                    deadline,
                    per_stream: d.per_stream.clone(),
                    hw_clock: cfg.hw_timestamps,
                    latency_queue: d.latency_queue,
                    rx_ready: d.rx_ready.clone(),
                    controls: controls.clone(),
                };
                let (port, streams, counters) = (d.tx_port.clone(), d.streams.clone(), d.tx_counters[core].clone());
                let rx = if core == 0 { inline_rx.take() } else { None };
                std::thread::spawn(move || {
                    // A core that panics stops the others (the guard is forgotten on return).
                    let on_panic = rawpkt_sys::signal::SetOnDrop(stop);
                    let r = worker::transmit(plan, port, streams, epoch, stop, &counters, rx);
                    std::mem::forget(on_panic);
                    // A core that failed stops the others too: the run is over.
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        let mut reporter = Reporter::new(&d.cfg, epoch, d.streams.iter().map(|s| s.spec.name.clone()).collect());
        if several {
            reporter.direction(direction_name(&d.cfg));
        }
        if cfg.control.is_some() {
            reporter.events = Some(events.clone());
        }
        running.push((tx_threads, rx_thread, reporter));
    }

    while !running.iter().all(|r| r.0.iter().all(|t| t.is_finished())) {
        std::thread::sleep(Duration::from_millis(50));
        for (d, r) in dirs.iter().zip(&mut running) {
            r.2.tick(&d.tx_counters, &d.rx_counters, &d.per_stream, false);
        }
    }
    let mut errors = Vec::new();
    let mut totals = [0u64; 3];
    for (d, (tx_threads, rx_thread, mut reporter)) in dirs.iter().zip(running) {
        let mut hist = None;
        // Each stream's departures, over the cores that timed them.
        let mut departed: Vec<Option<worker::Departed>> = d.streams.iter().map(|_| None).collect();
        for t in tx_threads {
            match t.join() {
                Ok(Ok(done)) => {
                    hist = hist.or(done.rx);
                    for dep in done.departed {
                        match &mut departed[dep.stream] {
                            Some(all) => all.add(&dep),
                            slot => *slot = Some(dep),
                        }
                    }
                }
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push(Fail::Runtime("a transmit thread panicked".into())),
            }
        }
        let tx_end = epoch.elapsed();
        d.tx_done.store(true, Ordering::Relaxed);
        match rx_thread.map(|t| t.join()) {
            Some(Ok(Ok(h))) => hist = Some(h),
            Some(Ok(Err(e))) => errors.push(e),
            Some(Err(_)) => errors.push(Fail::Runtime("the receive thread panicked".into())),
            None => {}
        }
        reporter.tick(&d.tx_counters, &d.rx_counters, &d.per_stream, true);
        let summary = summarize(
            d,
            &cfg,
            (tx_end, started, own_thread),
            hist,
            &departed,
            metrics_at,
            &mut errors,
        );
        reporter.summary(&summary);
        totals[0] += summary.tx[0];
        totals[1] += summary.rx[0];
        totals[2] += summary.tx[0].saturating_sub(summary.rx[0]);
    }
    if several {
        total(cfg.json, dirs.len(), totals);
    }
    // Not when a closed stdout stopped the run: that ends quietly.
    if stop.load(Ordering::Relaxed) && rawpkt_sys::signal::stdout_ok() && errors.is_empty() && !cfg.json {
        if events.since(0).iter().any(|e| e.action == "stop") {
            rawpkt_sys::errln!("pktgen: stopped through --control; queues torn down");
        } else {
            rawpkt_sys::errln!("pktgen: interrupted; queues torn down");
        }
    }
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// "TX -> RX", naming a direction in the output.
fn direction_name(cfg: &Config) -> String {
    format!(
        "{} -> {}",
        rawpkt_wire::text::echo(&cfg.tx_port),
        rawpkt_wire::text::echo(cfg.rx_port.as_deref().unwrap_or("-"))
    )
}

/// A direction's summary, and the failures it shows (nothing arrived, or nothing of a stream).
#[allow(clippy::too_many_arguments)]
fn summarize(
    d: &Dir,
    cfg: &Config,
    // When the cores ended, when the run started (wall clock), whether the receiver had a thread.
    (tx_end, started, own_thread): (Duration, std::time::SystemTime, bool),
    hist: Option<Vec<worker::RxHists>>,
    departed: &[Option<worker::Departed>],
    metrics_at: Option<std::net::SocketAddr>,
    errors: &mut Vec<Fail>,
) -> Summary {
    // Rates over the time the cores were sending, not the set-up and the drain around it.
    let sending = d
        .tx_counters
        .iter()
        .map(|c| c.active_ns.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);
    let window = if sending > 0 {
        Duration::from_nanos(sending)
    } else {
        tx_end
    };
    let rx_port = d.rx_port.as_ref();
    let mut summary = Summary::collect(
        &d.tx_counters,
        &d.rx_counters,
        window,
        (&d.streams, &d.per_stream),
        hist.as_deref(),
        departed,
        rx_port.is_some(),
    );
    // The port's exact counter where the device has one; the CQEs' 8-bit counts add up to a
    // lower bound only.
    if let Some(dr) = rx_port.and_then(|p| p.device_drops()) {
        summary.rx[2] = dr;
    }
    summary.clock = if cfg.hw_timestamps { "device" } else { "software" };
    summary.send_queues_per_core = d.queues_per_core;
    summary.metrics = metrics_at;
    summary.run = Some(report::run_json(&report::RunInfo {
        args: std::env::args().collect(),
        started,
        ports: std::iter::once(("tx", &d.tx_port))
            .chain(d.rx_port.iter().map(|p| ("rx", p)))
            .map(|(role, p)| (role, p.spec().to_string(), p.mac()))
            .collect(),
        src_mac: cfg.src_mac,
        dst_mac: d.dst_mac,
        streams: &d.streams,
        cores: d
            .tx_counters
            .iter()
            .map(|c| c.cpu.load(Ordering::Relaxed).checked_sub(1).map(|c| c as usize))
            .collect(),
        receiver: d.rx_port.as_ref().map(|_| if own_thread { "thread" } else { "core 0" }),
        model_cpu: std::env::var("RAWPKT_MODEL_CPU")
            .ok()
            .filter(|_| d.cfg.tx_port.starts_with("model:")),
    }));
    if cfg.rx_mode_asked && summary.rx[0] > 0 {
        check_rx_mode(&d.cfg, rx_port.map(|p| &**p));
    }
    // Sent and not one frame back: the frames went elsewhere (the wrong MAC, the wrong cable),
    // which is a failed run, not a lossy one. ping exits 1 for "no reply at all" the same way.
    if rx_port.is_some() && summary.tx[0] > 0 && summary.rx[0] == 0 && errors.is_empty() {
        let to = match &cfg.pcap {
            Some(_) => "as the pcap file says".to_string(),
            None => format!("to {}", rawpkt_wire::rule::MacText(d.dst_mac)),
        };
        errors.push(Fail::Runtime(format!(
            "none of the {} frames sent arrived at --rx-port {}; they were addressed {to}",
            summary.tx[0],
            rawpkt_wire::text::echo(rx_port.map_or("", |p| p.spec())),
        )));
    }
    // Frames arrived, but not one of some stream: its frames went where nothing reads them (a
    // queue the device steered them to that the receiver does not poll, a rule that takes them
    // elsewhere). As failed a run as the one above, for that stream; only where each frame is
    // counted in its stream (stamped), not in a replay.
    if rx_port.is_some() && errors.is_empty() && d.streams.iter().all(|s| s.traffic.stamped()) {
        if let Some(t) = summary.streams.iter().find(|t| t.tx[0] > 0 && t.rx[0] == 0) {
            errors.push(Fail::Runtime(format!(
                "stream {}: none of its {} frames arrived at --rx-port {}, where {} frames of the others did",
                t.name,
                t.tx[0],
                rawpkt_wire::text::echo(rx_port.map_or("", |p| p.spec())),
                summary.rx[0]
            )));
        }
    }
    summary
}

/// Checks that the port has the send queues the cores need (`Port::tx_queues`: an `xdp:` port
/// has one per interface queue) and chooses the latency stream's: its own after the load's where
/// there is one, else None, beside the load on the first core's first queue, said in one line.
fn send_queues(cfg: &Config, port: &rawpkt::Port, per_core: u16, latency: bool) -> Result<Option<u16>, Fail> {
    let load = cfg.cores * usize::from(per_core);
    let Some(n) = port.tx_queues() else {
        return Ok(Some(load as u16));
    };
    let n = usize::from(n);
    if load > n {
        let each = if per_core == 1 {
            String::new()
        } else {
            format!(" of {per_core} send queues each")
        };
        let most = n / usize::from(per_core);
        if most == 0 {
            return Err(Fail::Usage(format!(
                "--queues-per-core {per_core}: {} has {n} send queue{}",
                rawpkt_wire::text::echo(port.spec()),
                if n == 1 { "" } else { "s" },
            )));
        }
        return Err(Fail::Usage(format!(
            "--cores {}{each}: {} has {n} send queue{} (each core sends on queues of its own); at most {most} core{} here",
            cfg.cores,
            rawpkt_wire::text::echo(port.spec()),
            if n == 1 { "" } else { "s" },
            if most == 1 { "" } else { "s" },
        )));
    }
    if load < n || !latency {
        return Ok(Some(load as u16));
    }
    rawpkt_sys::errln!(
        "pktgen: {} has {n} send queue{}, all the load's: the latency stream shares the first core's, where its frames may wait behind the load's",
        rawpkt_wire::text::echo(port.spec()),
        if n == 1 { "" } else { "s" }
    );
    Ok(None)
}

/// Says in one line when a `model:` receive port asked to compress completions got none: the
/// device's count of compressed sessions is what ran (a queue takes the CQ its port gives it,
/// and a port may give an uncompressed one; the model NIC counts what it wrote, send CQs never
/// compress). Other ports do not say what their device wrote.
fn check_rx_mode(cfg: &Config, rx_port: Option<&rawpkt::Port>) {
    let Some((nic, _)) = rx_port.and_then(rawpkt::model::nic_of) else {
        return;
    };
    if cfg.rx_queue.rx_cqe_compression && nic.counters().cqe_sessions == 0 {
        let ran = cfg.rx_queue.clone().rx_cqe_compression(false);
        rawpkt_sys::errln!(
            "pktgen: --rx-mode {}: the model device wrote no compressed completions for --rx-port {}: what ran was {}",
            cfg.rx_queue.rx_mode(),
            rawpkt_wire::text::echo(cfg.rx_port.as_deref().unwrap_or_default()),
            ran.rx_mode()
        );
    }
}

/// A string for a JSON string literal.
pub(crate) fn json_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32).chars().collect(),
            c => vec![c],
        })
        .collect()
}

/// Prints the run's totals over its directions (--bidir, several port pairs), after their summaries:
/// each direction's figures add up to these.
pub(crate) fn total(json: bool, directions: usize, [tx, rx, lost]: [u64; 3]) {
    if json {
        rawpkt_sys::outln!(
            "{{\"type\":\"total\",\"directions\":{directions},\"tx_packets\":{tx},\"rx_packets\":{rx},\"lost\":{lost}}}"
        );
    } else {
        rawpkt_sys::outln!("total: {directions} directions  tx {tx} packets, rx {rx} packets, lost {lost}");
    }
}
