//! What l2-xconnect needs beyond its forwarding loop: its command line, and the
//! traffic `--generate` sends through a cross-connect of two model ports from inside the process
//! (model NICs exist only there). Each model NIC is a back-to-back pair of ports: the generator
//! sends 60-byte frames into A and B from the other port of each NIC (the far end) as fast as the
//! rings take them, and counts what comes back out of the far ends.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::env::open; // the model's RAWPKT_MODEL_* settings
use super::threads::Ready;
use super::{cli, Fail};
use rawpkt::{Burst, Pool, PoolConfig, Port, QueueConfig};

/// Cross-connect two ports: what arrives on A leaves on B, and the reverse
#[derive(clap::Parser, Debug)]
#[command(name = "l2-xconnect", after_help = super::fail::exit_status("l2-xconnect", ""))]
pub struct Cli {
    /// Port A (see the README's port specs)
    #[arg(long, value_name = "SPEC", default_value = "model:xc-a/1")]
    pub port_a: String,
    /// Port B
    #[arg(long, value_name = "SPEC", default_value = "model:xc-b/0")]
    pub port_b: String,
    /// Forwarding loops, one pinned thread each, with queue id = core index
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=128))]
    pub cores: u16,
    /// Packets per burst
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub burst: u16,
    /// Stop after this many seconds (default: run until Ctrl-C)
    #[arg(long, value_name = "SECS", value_parser = cli::positive_secs, allow_negative_numbers = true)]
    pub duration: Option<Duration>,
    /// Copy frames between per-port pools even though a zero-copy hand-off is possible
    #[arg(long)]
    pub copy: bool,
    /// Read the first byte of every packet, as a forwarder that looks at headers would (ixy)
    #[arg(long)]
    pub touch: bool,
    /// Seconds between stats lines, at least 0.1; 0 prints only the summary
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = cli::interval, allow_negative_numbers = true)]
    pub stats_interval: Duration,
    /// Model ports only: send 60-byte frames into A and B from the other port of each model NIC
    /// and count what comes out (model NICs exist only inside this process)
    #[arg(long)]
    pub generate: bool,
    /// The receive queues: cyclic (one 64-byte completion per frame), compressed (CQE
    /// compression), striding (a striding RQ, ConnectX-5 and later) or striding+compressed;
    /// mlx5: and model: ports [default: QueueConfig's, compressed]
    #[arg(long, value_name = "MODE", value_parser = rx_mode)]
    pub rx_mode: Option<&'static str>,
    /// Before forwarding, each core sends one burst of 60-byte IPv4/UDP frames out of A and one
    /// out of B, addressed to the other port: with A and B cabled to each other the frames then
    /// go round for as long as it forwards (testpmd's `start tx_first`)
    #[arg(long)]
    pub tx_first: bool,
}

/// `--rx-mode`: the name as [`QueueConfig::RX_MODES`] spells it.
fn rx_mode(s: &str) -> Result<&'static str, String> {
    QueueConfig::RX_MODES
        .iter()
        .map(|m| m.0)
        .find(|m| *m == s)
        .ok_or_else(|| {
            let names: Vec<_> = QueueConfig::RX_MODES.iter().map(|m| m.0).collect();
            format!("expected one of {}", names.join(", "))
        })
}

/// The frame `--tx-first` sends from `src` to `dst`: Ethernet, IPv4 10.0.0.1 -> 10.0.0.2, UDP
/// 42 -> 1337, 18 bytes of zeros; 60 bytes (64 on the wire with the FCS), checksums filled in.
pub fn tx_first_frame(src: [u8; 6], dst: [u8; 6]) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    // IPv4: version 4, 20-byte header, total length 46, TTL 64, UDP.
    f[14..24].copy_from_slice(&[0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17]);
    f[26..34].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    // UDP: 42 -> 1337, length 26.
    f[34..40].copy_from_slice(&[0, 42, 0x05, 0x39, 0, 26]);
    rawpkt_wire::wire::fill_checksums(&mut f, true, true);
    f
}

/// The two ports of a cross-connect, opened and checked, the generator with `--generate`, and a
/// CPU per core ([`super::cpu::plan`]).
pub struct Setup {
    pub a: Port,
    pub b: Port,
    pub generator: Option<Generator>,
    pub plan: Vec<Option<usize>>,
}

impl Setup {
    /// Opens what `cli` names, refusing one port twice (a usage mistake), and prints what the
    /// run will do: ports, cores, CPUs, burst and mode.
    pub fn open(cli: &Cli) -> Result<Setup, Fail> {
        let same =
            |who: &dyn std::fmt::Display| Fail::Usage(format!("--port-a and --port-b are the same port ({who})"));
        if cli.port_a == cli.port_b {
            return Err(same(&cli.port_a));
        }
        let opened = |opt, spec| {
            open(spec).map_err(|e| Fail::rawpkt(format_args!("{opt} {}", rawpkt_wire::text::echo(spec)), e))
        };
        let (a, b) = (opened("--port-a", &cli.port_a)?, opened("--port-b", &cli.port_b)?);
        if a.same_port(&b) {
            return Err(same(&a.identity()));
        }
        // Each core takes queue id = its index on both ports: a port with a fixed number of
        // queues (xdp: the interface's) bounds the cores, said before anything else is.
        for (name, port) in [("A", &a), ("B", &b)] {
            if let Some(n) = port.tx_queues().filter(|&n| cli.cores > n) {
                return Err(Fail::Usage(format!(
                    "--cores {}: port {name} ({}) has {n} queue{}, and each core takes its own on both ports (queue id = core index): at most {n} core{} here",
                    cli.cores,
                    rawpkt_wire::text::echo(port.spec()),
                    if n == 1 { "" } else { "s" },
                    if n == 1 { "" } else { "s" },
                )));
            }
        }
        // Receive modes are the mlx5 Direct Verbs datapath's (and the model's, which runs it): an
        // AF_XDP or plain verbs queue would take the fields and receive as it always does.
        if let Some(m) = cli.rx_mode {
            for (port, spec) in [(&a, &cli.port_a), (&b, &cli.port_b)] {
                if matches!(port.identity(), rawpkt::PortIdentity::Xdp { .. }) || spec.starts_with("verbs:") {
                    let spec = rawpkt_wire::text::echo(spec);
                    return Err(Fail::Usage(format!(
                        "--rx-mode {m}: {spec} has no receive modes (they are the mlx5 Direct Verbs datapath's: mlx5: and model: ports)"
                    )));
                }
            }
        }
        let generator = cli
            .generate
            .then(|| Generator::open(&cli.port_a, &cli.port_b))
            .transpose()?;
        let plan = super::cpu::plan(usize::from(cli.cores));
        let (sa, sb, n, cpus, burst) = (a.spec(), b.spec(), cli.cores, super::cpu::show(&plan), cli.burst);
        rawpkt_sys::outln!("l2-xconnect: A = {sa}, B = {sb}, {n} core(s) on CPU(s) {cpus}, burst {burst}");
        let mode = match cli.copy {
            true => "copy (--copy): per core a pool for A and one for B; frames copied across",
            false => "zero-copy: per core one pool for all four queues; RX bursts go to the other TX as they are",
        };
        let touch = if cli.touch && !cli.copy {
            "; first byte of each packet read (--touch)"
        } else {
            ""
        };
        let rx = match cli.rx_mode {
            Some(m) => format!("; receive queues {m} (--rx-mode)"),
            None => String::new(),
        };
        rawpkt_sys::outln!("mode: {mode}{touch}{rx}");
        Ok(Setup { a, b, generator, plan })
    }

    /// The end of the summary: the ports' device drops where they have a counter, what the
    /// generator sent and got back.
    pub fn summary(&self) {
        for (port, name) in [(&self.a, "A"), (&self.b, "B")] {
            if let Some(d) = port.device_drops() {
                rawpkt_sys::outln!("  port {name}: {d} frames dropped by the device for lack of RX buffers");
            }
        }
        if let Some(g) = &self.generator {
            rawpkt_sys::outln!("  {}", g.summary());
        }
    }
}

/// `model:NAME/P` -> `model:NAME/Q`, the other port of that model NIC's back-to-back pair.
pub fn far_end(spec: &str) -> Option<String> {
    let (name, port) = spec.strip_prefix("model:")?.rsplit_once('/')?;
    let other = match port {
        "0" => 1,
        "1" => 0,
        _ => return None,
    };
    (!name.is_empty() && !name.starts_with("afpacket=")).then(|| format!("model:{name}/{other}"))
}

/// Counters published every this many polls.
const PUBLISH_EVERY: u32 = 256;

/// The far ends of A and B, and what went through them.
pub struct Generator {
    far: [Port; 2],
    /// Sent into A, sent into B, received out of B, received out of A.
    counts: [AtomicU64; 4],
}

impl Generator {
    /// Opens the far ends of `a` and `b`: a usage mistake unless they are `model:NAME/P` ports
    /// of two different model NICs.
    pub fn open(a: &str, b: &str) -> Result<Generator, Fail> {
        let (Some(fa), Some(fb)) = (far_end(a), far_end(b)) else {
            let e = "--generate needs two model:NAME/P ports (it sends from the other port of each)";
            return Err(Fail::Usage(e.into()));
        };
        if [&fa, &fb].iter().any(|f| *f == a || *f == b) {
            return Err(Fail::Usage(
                "--generate needs A and B on two different model NICs".into(),
            ));
        }
        let far = |spec: &str| open(spec).map_err(|e| Fail::rawpkt(format_args!("--generate {spec}"), e));
        Ok(Generator {
            far: [far(&fa)?, far(&fb)?],
            counts: Default::default(),
        })
    }

    /// Sends and receives until `halt`, after saying once on `ready` whether its queues came up.
    pub fn run(&self, burst: usize, halt: &AtomicBool, ready: Ready) -> Result<(), Fail> {
        let setup = || -> Result<_, Fail> {
            let q = QueueConfig::default();
            let pinned: usize = self.far.iter().map(|p| p.buffers_pinned(&q)).sum();
            let pool = Pool::new(PoolConfig::default().buffers((pinned + 4 * burst) as u32))
                .map_err(|e| Fail::rawpkt("generator: packet pool", e))?;
            let mut queues = Vec::new();
            for port in &self.far {
                let what = |e: rawpkt::Error| Fail::rawpkt(format!("generator on {}", port.spec()), e);
                queues.push((
                    port.tx_queue(0, &pool, &q).map_err(what)?,
                    port.rx_queue(0, &pool, &q).map_err(what)?,
                ));
            }
            Ok((pool, queues))
        };
        let setup = setup();
        ready.say(&setup);
        let (pool, mut queues) = setup?;
        const HEADER: [u8; 14] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5];
        let (mut frames, mut got) = (Burst::new(&pool, burst), Burst::new(&pool, burst));
        let (mut counts, mut polls) = ([0u64; 4], 0u32);
        let publish = |c: &[u64; 4]| {
            c.iter()
                .zip(&self.counts)
                .for_each(|(c, o)| o.store(*c, Ordering::Relaxed))
        };
        while !halt.load(Ordering::Relaxed) {
            for (i, (tx, rx)) in queues.iter_mut().enumerate() {
                let had = frames.len();
                frames.alloc(frames.room(), 60);
                for j in had..frames.len() {
                    frames.data_mut(j)[..14].copy_from_slice(&HEADER);
                }
                let sent = tx
                    .tx_burst(&mut frames)
                    .map_err(|e| Fail::Runtime(format!("generator TX: {e}")))?;
                counts[i] += sent as u64;
                let got_n = rx
                    .rx_burst(&mut got)
                    .map_err(|e| Fail::Runtime(format!("generator RX: {e}")))?;
                counts[3 - i] += got_n as u64;
                got.clear();
            }
            polls = polls.wrapping_add(1);
            if polls % PUBLISH_EVERY == 0 {
                publish(&counts);
            }
        }
        publish(&counts);
        Ok(())
    }

    /// The summary line.
    pub fn summary(&self) -> String {
        let g = self.counts.each_ref().map(|c| c.load(Ordering::Relaxed));
        format!(
            "generator: sent {} into A and {} into B; received {} out of B and {} out of A",
            g[0], g[1], g[2], g[3]
        )
    }
}
