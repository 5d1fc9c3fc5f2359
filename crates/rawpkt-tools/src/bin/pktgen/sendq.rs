//! How many send queues each transmit core spreads its frames over. A NIC processes one send
//! queue's WQEs at a rate of its own, whatever the CPU feeding it can do: where one queue of the
//! device cannot take the rate a core is asked for, pktgen gives the core several and sends its
//! bursts to them in turn, as snabb's ConnectX-4 driver had to (below), and says so.

use rawpkt::{Port, PortIdentity, QueueConfig};

/// Most send queues a core takes (`--queues-per-core` too).
pub(crate) const MAX_PER_CORE: u16 = 8;

/// Packets a second one send queue of a kind of device takes at most, as reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Ceiling {
    pub pps: f64,
    /// The kind of send queue and the figure, for the line that says why.
    pub what: &'static str,
}

/// A SEND WQE per packet: the DV datapath on a ConnectX-4 (whose vport asks for 18 inline
/// header bytes, so no enhanced multi-packet send) and any ibverbs datapath (libmlx5 posts a
/// SEND per work request). One ConnectX-4 100G send queue tops out around 16 Mpps of 64-byte
/// frames, and four or more reach about 64 (snabb#1007, in the project's reference notes
/// `../shared/reference/mlx5-dv.md` section 8).
pub(crate) const SEND: Ceiling = Ceiling {
    pps: 16e6,
    what: "a SEND WQE per packet, as on a ConnectX-4: about 16 Mpps a queue",
};

/// Enhanced multi-packet send (ConnectX-5 and later, no minimum inline): up to 32 packets a WQE,
/// so the NIC fetches far fewer descriptors ("in order to save PCI bandwidth and improve
/// performance", DPDK `doc/guides/nics/mlx5.rst`, `txq_mpw_en`). No ConnectX-5 figure per queue
/// was found; a raw-ibverbs engine is reported reaching about 50 Mpps from one send queue of a
/// ConnectX-7, taken here as the ceiling (most cores stop below it anyway).
pub(crate) const EMPW: Ceiling = Ceiling {
    pps: 50e6,
    what: "enhanced multi-packet send WQEs: about 50 Mpps a queue",
};

/// The ceiling of one send queue of `port`'s device, from what the port says of itself: how many
/// buffers a send queue holds per entry (`Port::buffers_pinned`: one per WQEBB for a SEND per
/// packet, four for eMPW's data segments). None for AF_XDP ports, whose limit is the kernel's
/// driver, not a figure of ours.
pub(crate) fn ceiling(port: &Port) -> Option<Ceiling> {
    if matches!(port.identity(), PortIdentity::Xdp { .. }) {
        return None;
    }
    let cfg = QueueConfig::default();
    let size = cfg.size as usize;
    // One RX queue of `size` entries and one TX queue: what the TX queue holds over `size`.
    let tx = port.buffers_pinned(&cfg).saturating_sub(size);
    Some(if tx >= 3 * size { EMPW } else { SEND })
}

/// Send queues per core: `asked` (`--queues-per-core`) when given, else as many as the rate a
/// core is asked for needs at `ceiling`; and the one line that says so, when the choice is not
/// one queue or the queues asked for fall short.
pub(crate) fn per_core(
    asked: Option<u16>,
    rate_per_core: Option<f64>,
    ceiling: Option<Ceiling>,
    port: &str,
) -> (u16, Option<String>) {
    let (Some(rate), Some(c)) = (rate_per_core, ceiling) else {
        return (asked.unwrap_or(1), None);
    };
    let needed = (rate / c.pps).ceil().max(1.0);
    let mpps = rate / 1e6;
    match asked {
        Some(n) if f64::from(n) < needed => (
            n,
            Some(format!(
                "pktgen: --queues-per-core {n}: {mpps:.1} Mpps per core needs {needed} send queues of {port} ({}); sending on {n} as asked",
                c.what
            )),
        ),
        Some(n) => (n, None),
        None if needed <= 1.0 => (1, None),
        None => {
            let n = needed.min(f64::from(MAX_PER_CORE)) as u16;
            let short = if needed > f64::from(MAX_PER_CORE) {
                format!(", the most pktgen opens; even these take about {:.0} Mpps", f64::from(n) * c.pps / 1e6)
            } else {
                String::new()
            };
            (
                n,
                Some(format!(
                    "pktgen: {mpps:.1} Mpps per core is more than one send queue of {port} takes ({}): each core sends on {n} queues{short} (--queues-per-core N chooses)",
                    c.what
                )),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_core_gets_the_queues_its_rate_needs_at_the_device_ceiling() {
        // ConnectX-4: 16 Mpps a queue.
        assert_eq!(per_core(None, Some(10e6), Some(SEND), "p").0, 1);
        assert_eq!(per_core(None, Some(16e6), Some(SEND), "p").0, 1);
        let (n, line) = per_core(None, Some(20e6), Some(SEND), "mlx5:mlx5_0/1");
        assert_eq!(n, 2);
        let line = line.expect("said");
        assert!(
            line.contains("20.0 Mpps per core")
                && line.contains("mlx5:mlx5_0/1")
                && line.contains("16 Mpps")
                && line.contains("on 2 queues"),
            "{line}"
        );
        assert_eq!(per_core(None, Some(60e6), Some(SEND), "p").0, 4);
        // eMPW: 50 Mpps a queue.
        assert_eq!(per_core(None, Some(40e6), Some(EMPW), "p"), (1, None));
        assert_eq!(per_core(None, Some(120e6), Some(EMPW), "p").0, 3);
        // At most eight, and said.
        let (n, line) = per_core(None, Some(200e6), Some(SEND), "p");
        assert_eq!(n, MAX_PER_CORE);
        assert!(line
            .unwrap()
            .contains("the most pktgen opens; even these take about 128 Mpps"));
        // No rate (as fast as the ring takes) or no known ceiling: one, quietly.
        assert_eq!(per_core(None, None, Some(SEND), "p"), (1, None));
        assert_eq!(per_core(None, Some(100e6), None, "p"), (1, None));
    }

    #[test]
    fn queues_asked_for_are_kept_and_a_shortfall_is_said() {
        assert_eq!(per_core(Some(3), Some(1e6), Some(SEND), "p"), (3, None));
        assert_eq!(per_core(Some(2), None, Some(SEND), "p"), (2, None));
        let (n, line) = per_core(Some(1), Some(20e6), Some(SEND), "p");
        assert_eq!(n, 1);
        let line = line.expect("said");
        assert!(
            line.contains("--queues-per-core 1") && line.contains("needs 2 send queues"),
            "{line}"
        );
        assert!(!line.contains('\n'));
    }
}
