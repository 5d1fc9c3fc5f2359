//! pktgen: the engine's traffic generator. Opens ports through the public API only, runs one
//! pinned transmit loop per core and a receiver, prints a line per second and a summary.
// A binary exports nothing: its modules' items are `pub(crate)`, so dead code shows.
#![warn(unreachable_pub)]

mod cli;
mod metrics;
mod pace;
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
    if args.port.is_some() && args.rx_port.is_none() {
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

fn run(cfg: Config, stop: &'static AtomicBool) -> Result<(), Fail> {
    // A file to replay is read and checked before any port is touched.
    let replay = match &cfg.pcap {
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
    // The model NIC polls on a CPU of its own when there is one to spare (the last).
    if cfg.tx_port.starts_with("model:") && std::env::var_os("RAWPKT_MODEL_CPU").is_none() && cpus.len() > cfg.cores {
        if let Some(last) = cpus.last() {
            std::env::set_var("RAWPKT_MODEL_CPU", last.to_string());
        }
    }
    let tx_port = Arc::new(
        rawpkt_tools::env::open(&cfg.tx_port)
            .map_err(|e| Fail::rawpkt(format_args!("--port {}", rawpkt_wire::text::echo(&cfg.tx_port)), e))?,
    );
    // The receiving port's default rules take UDP (and the experimental EtherTypes) to its
    // MAC, which every stream but a GRE one is; GRE frames (IP protocol 47, which a verbs flow
    // cannot name) need the whole MAC on an mlx5: port. (An xdp: port's rule= options say what
    // it takes.)
    let gre = specs.iter().any(|s| s.headers.encap == template::Encap::Gre);
    let rx_opts = rawpkt::PortOptions::default().default_rules(if gre {
        rawpkt::DefaultRules::WholeMac
    } else {
        rawpkt::DefaultRules::default()
    });
    let rx_port = match &cfg.rx_port {
        Some(spec) => Some(Arc::new(rawpkt_tools::env::open_with(spec, &rx_opts).map_err(|e| {
            Fail::rawpkt(format_args!("--rx-port {}", rawpkt_wire::text::echo(spec)), e)
        })?)),
        None => None,
    };
    // A port's frames leave on its wire: the same port as receiver would count every one lost.
    if let Some(rx) = rx_port.as_ref().filter(|rx| rx.same_port(&tx_port)) {
        return Err(Fail::Usage(format!(
            "--port and --rx-port are the same port ({}); receive on the port at the other end of the wire",
            rx.identity()
        )));
    }
    // Receive modes are the mlx5 Direct Verbs datapath's (and the model's, which runs it): an
    // AF_XDP or plain verbs queue would take the fields and receive as it always does.
    if let Some(rx) = rx_port.as_ref().filter(|_| cfg.rx_mode_asked) {
        let spec = cfg.rx_port.as_deref().unwrap_or_default();
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
    // `Config` has made sure a capture has a receive port.
    let capture = match &cfg.capture {
        Some(path) => {
            Some(rawpkt_tools::pcap::Writer::create(path).map_err(|e| Fail::Runtime(format!("--capture {e}")))?)
        }
        None => None,
    };
    // Frames go to the receive port's own address unless --dst-mac says otherwise: a NIC port
    // (mlx5:, xdp:) takes only what is addressed to it.
    let dst_mac = cfg
        .dst_mac
        .or_else(|| rx_port.as_ref().and_then(|p| p.mac()))
        .unwrap_or(cli::DEFAULT_DST_MAC);
    let mut replay = replay;
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
                None => Traffic::generated(&spec, i as u8, cfg.src_mac, dst_mac),
            };
            Stream { spec, traffic }
        })
        .collect();
    // Template tags unique over the run (see `traffic::Held`).
    let mut base = 0u32;
    for s in &mut streams {
        s.traffic.tag_base = base;
        base += s.traffic.templates() as u32;
    }
    let streams = Arc::new(streams);
    // Send queues per core: as asked, else what the load's rate per core needs of the device.
    let load_rate = streams
        .iter()
        .filter(|s| !s.spec.latency)
        .try_fold(0.0, |sum, s| s.spec.rate.map(|r| sum + r));
    let (queues_per_core, said) = sendq::per_core(
        cfg.queues_per_core,
        load_rate.map(|r| r / cfg.cores as f64),
        sendq::ceiling(&tx_port),
        tx_port.spec(),
    );
    if let Some(line) = said {
        rawpkt_sys::errln!("{line}");
    }
    let latency_queue = send_queues(&cfg, &tx_port, queues_per_core, streams.iter().any(|s| s.spec.latency))?;
    let per_stream: Arc<Vec<StreamCounters>> = Arc::new(
        streams
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

    let tx_done = Arc::new(AtomicBool::new(false));
    let tx_counters: Vec<Arc<Counters>> = (0..cfg.cores).map(|_| Arc::new(Counters::default())).collect();
    let rx_counters = Arc::new(Counters::default());
    let mut metrics_at = None;
    if let Some(addr) = cfg.metrics {
        let bound = metrics::serve(
            addr,
            metrics::Sources {
                tx_port: cfg.tx_port.clone(),
                rx_port: cfg.rx_port.clone(),
                tx: tx_counters.clone(),
                rx: rx_counters.clone(),
                names: streams.iter().map(|s| s.spec.name.clone()).collect(),
                streams: per_stream.clone(),
            },
        )
        .map_err(Fail::Runtime)?;
        // The port the system chose, when port 0 asked it to: nobody could scrape it otherwise.
        if addr.port() == 0 {
            rawpkt_sys::errln!("pktgen: metrics at http://{bound}/metrics");
        }
        metrics_at = Some(bound);
    }
    let rx_ready = Arc::new(AtomicBool::new(false));
    let started = std::time::SystemTime::now();
    let epoch = Instant::now();
    let deadline = cfg.duration.map(|d| epoch + Duration::from_secs_f64(d));

    // CPUs: one per transmit core, one for a model NIC's own loop, one for the receiver. When
    // the receiver has none to itself it runs inside the first transmit core's loop: a spinning
    // thread sharing a CPU with the device model would starve it.
    let model_cpus = usize::from(cfg.tx_port.starts_with("model:"));
    if !cpus.is_empty() && cfg.cores + model_cpus > cpus.len() {
        let fits = cpus.len() - model_cpus;
        rawpkt_sys::errln!(
            "pktgen: warning: {} transmit loop{}{} and the model NIC's thread spin on {} CPUs: they take turns, and \
             the counts will show frames lost to scheduling, not to the datapath{}",
            cfg.cores,
            if cfg.cores == 1 { "" } else { "s" },
            if rx_port.is_some() {
                " (one with the receiver in it)"
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
    let own_thread = cpus.len() > cfg.cores + model_cpus;
    let rx_plan = rx_port.clone().map(|port| worker::RxPlan {
        port,
        capture,
        counters: rx_counters.clone(),
        streams: per_stream.clone(),
        stamps: streams.iter().all(|s| s.traffic.stamped()),
        epoch,
        hw_clock: cfg.hw_timestamps,
        rx_queue: cfg.rx_queue.clone(),
        // What was sent is known for sure when the receiver drains: on its own thread after
        // every core has ended, in the loop of the one core there is after that core's sends.
        sent: (own_thread || cfg.cores == 1).then(|| tx_counters.clone()),
    });
    let (rx_thread, mut inline_rx) = match rx_plan {
        Some(plan) if own_thread => {
            let (done, ready) = (tx_done.clone(), rx_ready.clone());
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
                rx_ready.store(true, Ordering::Release);
            }
            (None, plan)
        }
    };
    // The receive queues must exist before the first frame arrives: a frame steered to a queue
    // with no socket yet is lost. However long that takes; a receiver that failed says it is
    // done too, and one that panicked ends its thread.
    while !rx_ready.load(Ordering::Acquire)
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
                cpu: cpus.get(core).copied(),
                queues: queues_per_core,
                burst: cfg.burst,
                deadline,
                per_stream: per_stream.clone(),
                hw_clock: cfg.hw_timestamps,
                latency_queue,
                rx_ready: rx_ready.clone(),
            };
            let (port, streams, counters) = (tx_port.clone(), streams.clone(), tx_counters[core].clone());
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

    let mut reporter = Reporter::new(&cfg, epoch, streams.iter().map(|s| s.spec.name.clone()).collect());
    while !tx_threads.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_millis(50));
        reporter.tick(&tx_counters, &rx_counters, &per_stream, false);
    }
    let mut errors = Vec::new();
    let mut hist = None;
    // Each stream's departures, over the cores that timed them.
    let mut departed: Vec<Option<worker::Departed>> = streams.iter().map(|_| None).collect();
    for t in tx_threads {
        match t.join() {
            Ok(Ok(done)) => {
                hist = hist.or(done.rx);
                for d in done.departed {
                    match &mut departed[d.stream] {
                        Some(all) => all.add(&d),
                        slot => *slot = Some(d),
                    }
                }
            }
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push(Fail::Runtime("a transmit thread panicked".into())),
        }
    }
    let tx_end = epoch.elapsed();
    tx_done.store(true, Ordering::Relaxed);
    match rx_thread.map(|t| t.join()) {
        Some(Ok(Ok(h))) => hist = Some(h),
        Some(Ok(Err(e))) => errors.push(e),
        Some(Err(_)) => errors.push(Fail::Runtime("the receive thread panicked".into())),
        None => {}
    }
    reporter.tick(&tx_counters, &rx_counters, &per_stream, true);
    // Rates over the time the cores were sending, not the set-up and the drain around it.
    let sending = tx_counters
        .iter()
        .map(|c| c.active_ns.load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);
    let window = if sending > 0 {
        Duration::from_nanos(sending)
    } else {
        tx_end
    };
    let mut summary = Summary::collect(
        &tx_counters,
        &rx_counters,
        window,
        (&streams, &per_stream),
        hist.as_deref(),
        &departed,
        rx_port.is_some(),
    );
    // The port's exact counter where the device has one; the CQEs' 8-bit counts add up to a
    // lower bound only.
    if let Some(d) = rx_port.as_ref().and_then(|p| p.device_drops()) {
        summary.rx[2] = d;
    }
    summary.clock = if cfg.hw_timestamps { "device" } else { "software" };
    summary.send_queues_per_core = queues_per_core;
    summary.metrics = metrics_at;
    summary.run = Some(report::run_json(&report::RunInfo {
        args: std::env::args().collect(),
        started,
        ports: std::iter::once(("tx", &tx_port))
            .chain(rx_port.iter().map(|p| ("rx", p)))
            .map(|(role, p)| (role, p.spec().to_string(), p.mac()))
            .collect(),
        src_mac: cfg.src_mac,
        dst_mac,
        streams: &streams,
        cores: tx_counters
            .iter()
            .map(|c| c.cpu.load(Ordering::Relaxed).checked_sub(1).map(|c| c as usize))
            .collect(),
        receiver: rx_port.as_ref().map(|_| if own_thread { "thread" } else { "core 0" }),
        model_cpu: std::env::var("RAWPKT_MODEL_CPU")
            .ok()
            .filter(|_| cfg.tx_port.starts_with("model:")),
    }));
    reporter.summary(&summary);
    if cfg.rx_mode_asked && summary.rx[0] > 0 {
        check_rx_mode(&cfg, rx_port.as_deref());
    }
    // Sent and not one frame back: the frames went elsewhere (the wrong MAC, the wrong cable),
    // which is a failed run, not a lossy one. ping exits 1 for "no reply at all" the same way.
    if rx_port.is_some() && summary.tx[0] > 0 && summary.rx[0] == 0 && errors.is_empty() {
        let to = match &cfg.pcap {
            Some(_) => "as the pcap file says".to_string(),
            None => format!("to {}", rawpkt_wire::rule::MacText(dst_mac)),
        };
        errors.push(Fail::Runtime(format!(
            "none of the {} frames sent arrived at --rx-port {}; they were addressed {to}",
            summary.tx[0],
            rawpkt_wire::text::echo(rx_port.as_ref().map_or("", |p| p.spec())),
        )));
    }
    // Frames arrived, but not one of some stream: its frames went where nothing reads them (a
    // queue the device steered them to that the receiver does not poll, a rule that takes them
    // elsewhere). As failed a run as the one above, for that stream; only where each frame is
    // counted in its stream (stamped), not in a replay.
    if rx_port.is_some() && errors.is_empty() && streams.iter().all(|s| s.traffic.stamped()) {
        if let Some(t) = summary.streams.iter().find(|t| t.tx[0] > 0 && t.rx[0] == 0) {
            errors.push(Fail::Runtime(format!(
                "stream {}: none of its {} frames arrived at --rx-port {}, where {} frames of the others did",
                t.name,
                t.tx[0],
                rawpkt_wire::text::echo(rx_port.as_ref().map_or("", |p| p.spec())),
                summary.rx[0]
            )));
        }
    }
    // Not when a closed stdout stopped the run: that ends quietly.
    if stop.load(Ordering::Relaxed) && rawpkt_sys::signal::stdout_ok() && errors.is_empty() && !cfg.json {
        rawpkt_sys::errln!("pktgen: interrupted; queues torn down");
    }
    match errors.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
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
