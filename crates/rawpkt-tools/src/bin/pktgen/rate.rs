//! Rates as users give them: packets per second, bit rates on the wire (L1, the default, or L2)
//! and a percentage of the port's line rate; one parser for `--rate` and stream files.
//!
//! A bit rate counts by default what a frame takes on the wire, as a link's line rate does
//! (TRex's `bps_L1`), so that `10Gbps` and `100%` of a 10 Gbit/s port are one rate: at L1 each
//! frame of `len` bytes (pktgen's sizes leave the FCS out) takes `len + 4` (FCS) `+ 8` (preamble
//! and SFD) `+ 12` (inter-frame gap) bytes, so 64-byte frames (60 here) fill 10 Gbit/s at
//! 14.88 Mpps; at L2 (`-l2`, TRex's `bps_L2`) only the frame and its FCS count, `len + 4`. A
//! percentage is of the port's line rate at L1: `100%` of a 10 Gbit/s port is 14.88 Mpps of
//! 60-byte frames.

/// Bytes a frame takes beyond its own at L2: the FCS.
pub(crate) const FCS: f64 = 4.0;
/// Bytes a frame takes beyond its FCS at L1: preamble and SFD (8) and the inter-frame gap (12).
pub(crate) const PREAMBLE_IFG: f64 = 20.0;

/// A rate as given, before the frame size and the port's line rate turn it into packets per
/// second ([`Rate::pps`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Rate {
    /// Packets per second.
    Pps(f64),
    /// Bits per second counting FCS, preamble, SFD and inter-frame gap (L1).
    L1(f64),
    /// Bits per second counting the frame and its FCS (L2).
    L2(f64),
    /// Percent of the port's line rate, at L1.
    Percent(f64),
}

/// What `--rate` takes, for messages.
pub(crate) const SYNTAX: &str =
    "expected packets per second (1M, 500k, 2.5Mpps), a bit rate on the wire (2Gbps, 500Mbps; L2 with -l2: 2Gbps-l2) or a percentage of the port's line rate (50%)";

/// Parses `1M`, `500k`, `14.88Mpps`, `250000`, `2Gbps`, `2Gbps-l1`, `2Gbps-l2`, `800Mbit`,
/// `50%`. Suffixes are case-insensitive except `m`/`M`, both mega (there are no millipackets).
pub(crate) fn parse_rate(s: &str) -> Result<Rate, String> {
    let t = s.trim();
    let bad = || format!("{s:?}: {SYNTAX}");
    if let Some(p) = t.strip_suffix('%') {
        let v: f64 = p.trim().parse().map_err(|_| bad())?;
        if !(v.is_finite() && v > 0.0 && v <= 100.0) {
            return Err(format!("{s:?}: a percentage of the line rate from above 0 to 100"));
        }
        return Ok(Rate::Percent(v));
    }
    let lower = t.to_ascii_lowercase();
    // The layer of a bit rate, then its unit.
    let (body, layer) = match lower.strip_suffix("-l2") {
        Some(b) => (b, Some(2)),
        None => match lower.strip_suffix("-l1") {
            Some(b) => (b, Some(1)),
            None => (lower.as_str(), None),
        },
    };
    let (body, bits) = match ["bps", "bit/s", "bit"].iter().find_map(|u| body.strip_suffix(u)) {
        Some(b) => (b, true),
        None => (body.strip_suffix("pps").unwrap_or(body), false),
    };
    if layer.is_some() && !bits {
        return Err(bad());
    }
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1e3),
        Some('m') => (&body[..body.len() - 1], 1e6),
        Some('g') => (&body[..body.len() - 1], 1e9),
        Some('t') if bits => (&body[..body.len() - 1], 1e12),
        _ => (body, 1.0),
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let v = v * mult;
    // Below one packet a second the credit stays under one packet for ages (forever at
    // 1e-300): pktgen would run and send nothing.
    if !(bits || v.is_finite() && v >= 1.0) {
        return Err(format!("{s:?}: must be at least 1 packet per second"));
    }
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("{s:?}: must be more than 0"));
    }
    Ok(match (bits, layer) {
        (false, _) => Rate::Pps(v),
        (true, Some(2)) => Rate::L2(v),
        (true, _) => Rate::L1(v),
    })
}

impl Rate {
    /// Packets per second if that is how it was given.
    pub(crate) fn as_pps(self) -> Option<f64> {
        match self {
            Rate::Pps(p) => Some(p),
            _ => None,
        }
    }

    /// Whether the rate depends on the port's line rate.
    pub(crate) fn needs_link(self) -> bool {
        matches!(self, Rate::Percent(_))
    }

    /// Packets per second of frames `mean_len` bytes long on average (without FCS), on a port
    /// whose line rate is `link_bps` (None: unknown, which a percentage cannot do without).
    pub(crate) fn pps(self, mean_len: f64, link_bps: Option<f64>) -> Result<f64, String> {
        let l1 = (mean_len + FCS + PREAMBLE_IFG) * 8.0;
        let pps = match self {
            Rate::Pps(p) => p,
            Rate::L1(b) => b / l1,
            Rate::L2(b) => b / ((mean_len + FCS) * 8.0),
            Rate::Percent(p) => match link_bps {
                Some(l) => l * p / 100.0 / l1,
                None => return Err("the port does not report its line rate; give packets or bits per second".into()),
            },
        };
        if !(pps.is_finite() && pps >= 1.0) {
            return Err(format!(
                "is {pps:.3} packets per second of {mean_len:.0}-byte frames; at least 1 is needed"
            ));
        }
        Ok(pps)
    }

    /// How the rate was given, for messages.
    pub(crate) fn text(self) -> String {
        match self {
            Rate::Pps(p) => format!("{p} pps"),
            Rate::L1(b) => format!("{} Gbit/s (L1)", b / 1e9),
            Rate::L2(b) => format!("{} Gbit/s (L2)", b / 1e9),
            Rate::Percent(p) => format!("{p}% of the line rate"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_parse() {
        assert_eq!(parse_rate("1M"), Ok(Rate::Pps(1e6)));
        assert_eq!(parse_rate("500k"), Ok(Rate::Pps(5e5)));
        assert_eq!(parse_rate("14.88Mpps"), Ok(Rate::Pps(14.88e6)));
        assert_eq!(parse_rate("250000"), Ok(Rate::Pps(250000.0)));
        assert_eq!(parse_rate("1e6"), Ok(Rate::Pps(1e6)));
        assert_eq!(parse_rate("2Gbps"), Ok(Rate::L1(2e9)));
        assert_eq!(parse_rate("2gbps-l1"), Ok(Rate::L1(2e9)));
        assert_eq!(parse_rate("2Gbps-l2"), Ok(Rate::L2(2e9)));
        assert_eq!(parse_rate("2Gbps-L2"), Ok(Rate::L2(2e9)));
        assert_eq!(parse_rate("800Mbit/s"), Ok(Rate::L1(8e8)));
        assert_eq!(parse_rate("1Tbps"), Ok(Rate::L1(1e12)));
        assert_eq!(parse_rate("50%"), Ok(Rate::Percent(50.0)));
        assert_eq!(parse_rate("0.5 %"), Ok(Rate::Percent(0.5)));
        for bad in ["fast", "", "1Mpps-l2", "%", "2Xbps", "1T", "bps"] {
            assert!(
                parse_rate(bad).unwrap_err().contains("expected packets per second"),
                "{bad:?}"
            );
        }
        for bad in ["0", "-1M", "0.5", "1e-300", "inf", "NaN", "0.0001k"] {
            assert!(
                parse_rate(bad).unwrap_err().contains("at least 1 packet per second"),
                "{bad:?}"
            );
        }
        for bad in ["0Gbps", "-1Mbps", "infbps"] {
            assert!(parse_rate(bad).unwrap_err().contains("more than 0"), "{bad:?}");
        }
        for bad in ["0%", "101%", "-5%"] {
            assert!(parse_rate(bad).unwrap_err().contains("from above 0 to 100"), "{bad:?}");
        }
    }

    #[test]
    fn bit_rates_and_percentages_become_exact_pps() {
        // 10 Gbit/s of 64-byte frames (60 without FCS): 10e9 / (84 * 8) = 14 880 952.38 pps.
        let line = 10e9 / 672.0;
        assert_eq!(Rate::L1(10e9).pps(60.0, None).unwrap(), line);
        assert_eq!(Rate::Percent(100.0).pps(60.0, Some(10e9)).unwrap(), line);
        // 2 Gbit/s at L1 of 1514-byte frames: 2e9 / (1538 * 8).
        assert_eq!(Rate::L1(2e9).pps(1514.0, None).unwrap(), 2e9 / 12304.0);
        // At L2 only the frame and its FCS: 2e9 / (64 * 8) = 3 906 250.
        assert_eq!(Rate::L2(2e9).pps(60.0, None).unwrap(), 3_906_250.0);
        // 50% of a 100 Gbit/s port, 60-byte frames: 50e9 / 672.
        assert_eq!(Rate::Percent(50.0).pps(60.0, Some(100e9)).unwrap(), 50e9 / 672.0);
        assert_eq!(Rate::Pps(1e6).pps(1514.0, None).unwrap(), 1e6);
        assert!(Rate::Percent(50.0).pps(60.0, None).unwrap_err().contains("line rate"));
        assert!(Rate::L1(100.0).pps(60.0, None).unwrap_err().contains("at least 1"));
    }
}
