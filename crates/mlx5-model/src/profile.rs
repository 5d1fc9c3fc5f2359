//! Device profiles and behaviour knobs: how strict and how varied the model is.
//!
//! The default device ([`ModelConfig::default`]) is the model as it always was: the forgiving
//! choice wherever the sources leave a device some freedom (a free-running striding `wqe_id`,
//! every flush CQE written at once, regular compressed sessions, a free-running clock). Silicon
//! may take the other choices, so a driver that is right only against the default is not known
//! to be right. A profile ([`ModelConfig::profile`]) is a ConnectX generation as the sources
//! describe it, with the knobs a device of that generation may turn; a knob
//! ([`ModelConfig::knob`], `name=value`) turns one behaviour on its own.
//!
//! | profile | identity | what differs from the default |
//! |---|---|---|
//! | `default` | ConnectX-5 (15b3:1017, part 4119, fw 16.35.2000), 156.25 MHz clock | nothing: the model as it was |
//! | `cx5` | the same | `wqe_id=ring`, `flush=late:2`, `flush_ce=honour_ce`, `zip=irregular:5` |
//! | `cx6dx` | ConnectX-6 Dx (15b3:101d, part 4125, fw 22.36.1010), 1 GHz | the `cx5` knobs, the real-time clock (`clock=real-time`, `rq_ts_cap=rt`) |
//! | `cx7` | ConnectX-7 (15b3:1021, part 4129, fw 28.43.3608), 1 GHz | the `cx5` knobs, `err_counter=stride`, `rq_ts_cap=fr_rt` |
//! | `strict` | ConnectX-5 identity, 1 GHz clock in real-time format | every adversarial value: `wqe_id=ring`, `err_counter=zero`, `flush=late:3+partial:2`, `flush_ce=honour_ce`, `zip=irregular:11`, `vlan_insert=off`, `devx=absent`, `flow_groups=reverse`, `cq_overrun=error` |
//!
//! `ext_strides=off` (firmware whose striding WQEs take 2^9 strides and up) is in no profile: on
//! it a driver that posts a buffer per stride has no striding queue to run (rawpkt opens a
//! cyclic one instead), so the striding tests would have nothing to test and the other knobs
//! would never reach a striding queue; it is tested on its own.
//!
//! Where a value is the model's guess rather than a source's (marked "assumed" in
//! `docs/mlx5-notes.md`, Profiles), it is what a hardware self-test reports back.

use std::fmt;

use crate::ModelConfig;

/// How a striding RQ's CQE names its WQE in `wqe_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeId {
    /// The device's WQE counter mod 2^16 (the default).
    Counter,
    /// The WQE's index in the ring (`counter & (wqe_cnt - 1)`): what the kernel's mlx5e reads
    /// (`en_rx.c` `mlx5e_handle_rx_cqe_mpwrq` indexes `rq->mpwqe.info[wqe_id]` directly) and DPDK
    /// compares only on the ring bits (`mlx5_rx.c` `mlx5_rx_burst_mprq`).
    Ring,
}

/// What a striding RQ's error CQE holds in `wqe_counter` (no source says; DPDK and the kernel
/// read it only for a dump).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrCounter {
    /// The WQE counter mod 2^16 (the default).
    Wqe,
    /// The stride the failed frame started at.
    Stride,
    /// 0.
    Zero,
}

/// When the flush CQEs of an SQ in error reach the CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Flush {
    /// Flush CQEs are written this many device steps after the WQE was flushed (0: at once),
    /// even after the queue was reset in between: they were in flight.
    pub late: u32,
    /// Only every `partial`-th flushed WQE that would get a CQE gets one (0 or 1: all).
    pub partial: u32,
}

/// Which flushed WQEs get a WR_FLUSH_ERR CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushCe {
    /// Only those that asked for a completion (CE = 2): the default.
    Signalled,
    /// As the WQE's CE field says (DPDK `mlx5_prm.h` `MLX5_COMP_ONLY_ERR` 0: a CQE for every
    /// error, flushes included; `MLX5_COMP_ONLY_FIRST_ERR` 1: only for the first error;
    /// `MLX5_COMP_ALWAYS` 2: always).
    HonourCe,
}

/// How receive completions of a compressing CQ are cut into sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zip {
    /// As many as may share a title, up to `max_num` (the default).
    Regular,
    /// Sessions of random length (1 to `max_num`; 1 is a plain CQE), cut where a PRNG seeded
    /// with the value says: a device that compresses what it has when it has it.
    Irregular(u64),
    /// Never compressed.
    Never,
}

/// The format of the CQE `timestamp` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Ticks of a free-running counter of `khz` kHz (`hca_core_clock`).
    FreeRunning {
        /// The counter's frequency.
        khz: u64,
    },
    /// Real time, `seconds << 32 | nanoseconds` (ConnectX-6 Dx and later with the MTUTC
    /// register in real-time mode; DPDK `mlx5_rxtx.h` `mlx5_txpp_convert_rx_ts`). The counter
    /// of `ibv_query_rt_values_ex` still runs at `hca_core_clock` = 1 GHz.
    RealTime,
}

/// `cmd_hca_cap.rq_ts_format`: what timestamp formats a WQ may be made with (kernel `qp.c`
/// `get_rq_ts_format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsCap {
    /// Free-running only.
    Fr,
    /// Real time only.
    Rt,
    /// Either.
    FrRt,
}

/// What DevX the model library's devices answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Devx {
    /// Every capability page the model has, the MTUTC register.
    Full,
    /// DevX contexts and the capability pages, no register access (the model library as it
    /// was).
    InlineOnly,
    /// No DevX: `mlx5dv_open_device` with DevX fails (a kernel without it).
    Absent,
}

/// What a CQ does when the device finds it full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqOverrun {
    /// The completion is dropped and counted (the default).
    Drop,
    /// The CQ enters the error state, writes nothing more and raises a CQ error event (kernel
    /// `cq.c` `mlx5_ib_cq_event`: `IBV_EVENT_CQ_ERR`).
    Error,
}

/// How a port's link behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    /// Sends as soon as a doorbell comes (the default).
    Up,
    /// Down: nothing is sent or received; the queues' WQEs wait.
    Down,
    /// Paused (PFC / 802.3x pause frames from the peer) for this many ms of device time from
    /// the first doorbell, then up.
    Pause(u32),
}

/// Every behaviour knob of a model device, each defaulting to the model as it always was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knobs {
    pub wqe_id: WqeId,
    pub err_counter: ErrCounter,
    pub flush: Flush,
    pub flush_ce: FlushCe,
    pub zip: Zip,
    pub clock: Clock,
    pub rq_ts_cap: TsCap,
    /// `cmd_hca_cap.ext_stride_num_range`: striding WQEs of 2^3 strides and up; off, 2^9 and up
    /// (kernel `main.c` `mlx5_ib_query_device`).
    pub ext_strides: bool,
    /// `per_protocol_networking_offload_caps.wqe_vlan_insert`: off, a send WQE asking for a VLAN
    /// insertion fails (`docs/mlx5-notes.md`, Send WQEs).
    pub vlan_insert: bool,
    pub devx: Devx,
    /// Which of two overlapping flow rules of one priority wins: the one created first
    /// (`false`, the default) or the one created last.
    pub flow_groups_reverse: bool,
    pub cq_overrun: CqOverrun,
    pub link: LinkMode,
    /// What the wires do to the frames they carry (`wire_drop`, `wire_dup`, `wire_swap`: every
    /// Nth frame lost, doubled, swapped with the next; [`crate::Impairment`]). Not a NIC's
    /// behaviour: a lossy link or a device under test, for testing what a receiver counts.
    pub wire: crate::Impairment,
}

impl Default for Knobs {
    fn default() -> Knobs {
        Knobs {
            wqe_id: WqeId::Counter,
            err_counter: ErrCounter::Wqe,
            flush: Flush::default(),
            flush_ce: FlushCe::Signalled,
            zip: Zip::Regular,
            clock: Clock::FreeRunning {
                khz: crate::HCA_CORE_CLOCK_KHZ,
            },
            rq_ts_cap: TsCap::Fr,
            ext_strides: true,
            vlan_insert: true,
            devx: Devx::InlineOnly,
            flow_groups_reverse: false,
            cq_overrun: CqOverrun::Drop,
            link: LinkMode::Up,
            wire: crate::Impairment::default(),
        }
    }
}

/// What a device says it is: the PCI device id (sysfs, DPDK's PCI table), `vendor_part_id` and
/// `hca_type`, the firmware version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    pub pci_device_id: u16,
    pub vendor_part_id: u32,
    pub hca_type: &'static str,
    pub fw_ver: &'static str,
}

impl Identity {
    /// ConnectX-5: PCI 15b3:1017 (DPDK `mlx5_common.h` `PCI_DEVICE_ID_MELLANOX_CONNECTX5`),
    /// part 4119; firmware 16.x (model-verbs `device.rs` cites the published `ibv_devinfo`).
    pub const CONNECTX5: Identity = Identity {
        pci_device_id: 0x1017,
        vendor_part_id: 4119,
        hca_type: "MT4119",
        fw_ver: "16.35.2000",
    };
    /// ConnectX-6 Dx: 15b3:101d (`PCI_DEVICE_ID_MELLANOX_CONNECTX6DX`), part 4125, firmware
    /// 22.36.1010 (a published `ibv_devinfo -vv`).
    pub const CONNECTX6DX: Identity = Identity {
        pci_device_id: 0x101d,
        vendor_part_id: 4125,
        hca_type: "MT4125",
        fw_ver: "22.36.1010",
    };
    /// ConnectX-7: 15b3:1021 (`PCI_DEVICE_ID_MELLANOX_CONNECTX7`), part 4129, firmware
    /// 28.43.3608 (a published `ibv_devinfo`).
    pub const CONNECTX7: Identity = Identity {
        pci_device_id: 0x1021,
        vendor_part_id: 4129,
        hca_type: "MT4129",
        fw_ver: "28.43.3608",
    };
}

/// The profiles [`ModelConfig::profile`] knows, with one line each (for `--help`).
pub const PROFILES: &[(&str, &str)] = &[
    ("default", "the model as it always was: a ConnectX-5 with every forgiving choice"),
    (
        "cx5",
        "ConnectX-5: ring-index wqe_id, late flush CQEs honouring CE, irregular compressed sessions",
    ),
    (
        "cx6dx",
        "ConnectX-6 Dx: the cx5 behaviours, a 1 GHz clock in real-time CQE format",
    ),
    (
        "cx7",
        "ConnectX-7: the cx5 behaviours, a 1 GHz free-running clock (rq_ts_format FR and RT), stride index in error CQEs",
    ),
    (
        "strict",
        "every adversarial choice at once, no DevX, no VLAN insertion",
    ),
];

/// The knobs [`ModelConfig::knob`] takes, with their values (for `--help` and errors).
pub const KNOBS: &[(&str, &str)] = &[
    ("wqe_id", "counter|ring"),
    ("err_counter", "wqe|stride|zero"),
    ("flush", "eager|late:N|partial:K|late:N+partial:K"),
    ("flush_ce", "signalled|honour_ce"),
    ("zip", "regular|irregular:SEED|never"),
    ("clock", "free-running:KHZ|real-time"),
    ("rq_ts_cap", "fr|rt|fr_rt"),
    ("ext_strides", "on|off"),
    ("vlan_insert", "on|off"),
    ("devx", "full|inline-only|absent"),
    ("flow_groups", "creation|reverse"),
    ("cq_overrun", "drop|error"),
    ("link", "up|down|pause:MS"),
    ("wire_drop", "N (every Nth frame a port sends is lost; 0: none)"),
    ("wire_dup", "N (every Nth is sent twice; 0: none)"),
    ("wire_swap", "N (every Nth, at least 2, leaves after the next; 0: none)"),
];

fn on_off(v: &str) -> Option<bool> {
    match v {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

fn num<T: std::str::FromStr>(v: Option<&str>) -> Option<T> {
    v?.parse().ok()
}

impl Knobs {
    /// Sets the knob `item` (`name=value`) says; one line saying what is wrong otherwise.
    pub fn set(&mut self, item: &str) -> Result<(), String> {
        let item = item.trim();
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("model knob {item:?}: expected NAME=VALUE ({})", knob_names()))?;
        let Some(&(_, values)) = KNOBS.iter().find(|(k, _)| *k == name) else {
            return Err(format!("model knob {name:?}: no such knob ({})", knob_names()));
        };
        let bad = || format!("model knob {name}={value}: expected {name}={values}");
        let (head, arg) = match value.split_once(':') {
            Some((h, a)) => (h, Some(a)),
            None => (value, None),
        };
        match name {
            "wqe_id" => {
                self.wqe_id = match value {
                    "counter" => WqeId::Counter,
                    "ring" => WqeId::Ring,
                    _ => return Err(bad()),
                }
            }
            "err_counter" => {
                self.err_counter = match value {
                    "wqe" => ErrCounter::Wqe,
                    "stride" => ErrCounter::Stride,
                    "zero" => ErrCounter::Zero,
                    _ => return Err(bad()),
                }
            }
            "flush" => {
                let mut f = Flush::default();
                if value != "eager" {
                    for part in value.split('+') {
                        match part.split_once(':') {
                            Some(("late", n)) => f.late = n.parse().ok().filter(|&n| n > 0).ok_or_else(bad)?,
                            Some(("partial", k)) => f.partial = k.parse().ok().filter(|&k| k > 1).ok_or_else(bad)?,
                            _ => return Err(bad()),
                        }
                    }
                }
                self.flush = f;
            }
            "flush_ce" => {
                self.flush_ce = match value {
                    "signalled" => FlushCe::Signalled,
                    "honour_ce" => FlushCe::HonourCe,
                    _ => return Err(bad()),
                }
            }
            "zip" => {
                self.zip = match (head, arg) {
                    ("regular", None) => Zip::Regular,
                    ("never", None) => Zip::Never,
                    ("irregular", a) => Zip::Irregular(num(a.or(Some("1"))).ok_or_else(bad)?),
                    _ => return Err(bad()),
                }
            }
            "clock" => {
                self.clock = match (head, arg) {
                    ("real-time", None) => Clock::RealTime,
                    ("free-running", a) => Clock::FreeRunning {
                        khz: num(a)
                            .filter(|&k: &u64| (1..=10_000_000).contains(&k))
                            .ok_or_else(bad)?,
                    },
                    _ => return Err(bad()),
                }
            }
            "rq_ts_cap" => {
                self.rq_ts_cap = match value {
                    "fr" => TsCap::Fr,
                    "rt" => TsCap::Rt,
                    "fr_rt" => TsCap::FrRt,
                    _ => return Err(bad()),
                }
            }
            "ext_strides" => self.ext_strides = on_off(value).ok_or_else(bad)?,
            "vlan_insert" => self.vlan_insert = on_off(value).ok_or_else(bad)?,
            "devx" => {
                self.devx = match value {
                    "full" => Devx::Full,
                    "inline-only" => Devx::InlineOnly,
                    "absent" => Devx::Absent,
                    _ => return Err(bad()),
                }
            }
            "flow_groups" => {
                self.flow_groups_reverse = match value {
                    "creation" => false,
                    "reverse" => true,
                    _ => return Err(bad()),
                }
            }
            "cq_overrun" => {
                self.cq_overrun = match value {
                    "drop" => CqOverrun::Drop,
                    "error" => CqOverrun::Error,
                    _ => return Err(bad()),
                }
            }
            "link" => {
                self.link = match (head, arg) {
                    ("up", None) => LinkMode::Up,
                    ("down", None) => LinkMode::Down,
                    ("pause", a) => LinkMode::Pause(num(a).ok_or_else(bad)?),
                    _ => return Err(bad()),
                }
            }
            "wire_drop" => self.wire.drop_every = value.parse().map_err(|_| bad())?,
            "wire_dup" => self.wire.duplicate_every = value.parse().map_err(|_| bad())?,
            // Every frame held behind the next would be no swap at all.
            "wire_swap" => self.wire.swap_every = value.parse().ok().filter(|&n| n != 1).ok_or_else(bad)?,
            _ => unreachable!("every name of KNOBS is handled"),
        }
        Ok(())
    }

    /// The knobs that differ from the default, as `name=value` items.
    pub fn changed(&self) -> Vec<String> {
        let d = Knobs::default();
        let mut v = Vec::new();
        let all = self.items();
        for (item, default) in all.iter().zip(d.items()) {
            if *item != default {
                v.push(item.clone());
            }
        }
        v
    }

    /// Every knob as `name=value`, in the order of [`KNOBS`].
    pub fn items(&self) -> Vec<String> {
        let flush = match self.flush {
            Flush { late: 0, partial: 0 } => "eager".to_string(),
            Flush { late, partial: 0 } => format!("late:{late}"),
            Flush { late: 0, partial } => format!("partial:{partial}"),
            Flush { late, partial } => format!("late:{late}+partial:{partial}"),
        };
        vec![
            format!(
                "wqe_id={}",
                match self.wqe_id {
                    WqeId::Counter => "counter",
                    WqeId::Ring => "ring",
                }
            ),
            format!(
                "err_counter={}",
                match self.err_counter {
                    ErrCounter::Wqe => "wqe",
                    ErrCounter::Stride => "stride",
                    ErrCounter::Zero => "zero",
                }
            ),
            format!("flush={flush}"),
            format!(
                "flush_ce={}",
                match self.flush_ce {
                    FlushCe::Signalled => "signalled",
                    FlushCe::HonourCe => "honour_ce",
                }
            ),
            match self.zip {
                Zip::Regular => "zip=regular".into(),
                Zip::Never => "zip=never".into(),
                Zip::Irregular(s) => format!("zip=irregular:{s}"),
            },
            match self.clock {
                Clock::FreeRunning { khz } => format!("clock=free-running:{khz}"),
                Clock::RealTime => "clock=real-time".into(),
            },
            format!(
                "rq_ts_cap={}",
                match self.rq_ts_cap {
                    TsCap::Fr => "fr",
                    TsCap::Rt => "rt",
                    TsCap::FrRt => "fr_rt",
                }
            ),
            format!("ext_strides={}", if self.ext_strides { "on" } else { "off" }),
            format!("vlan_insert={}", if self.vlan_insert { "on" } else { "off" }),
            format!(
                "devx={}",
                match self.devx {
                    Devx::Full => "full",
                    Devx::InlineOnly => "inline-only",
                    Devx::Absent => "absent",
                }
            ),
            format!(
                "flow_groups={}",
                if self.flow_groups_reverse {
                    "reverse"
                } else {
                    "creation"
                }
            ),
            format!(
                "cq_overrun={}",
                match self.cq_overrun {
                    CqOverrun::Drop => "drop",
                    CqOverrun::Error => "error",
                }
            ),
            match self.link {
                LinkMode::Up => "link=up".into(),
                LinkMode::Down => "link=down".into(),
                LinkMode::Pause(ms) => format!("link=pause:{ms}"),
            },
            format!("wire_drop={}", self.wire.drop_every),
            format!("wire_dup={}", self.wire.duplicate_every),
            format!("wire_swap={}", self.wire.swap_every),
        ]
    }

    /// `hca_core_clock` in kHz: the free-running counter's frequency (1 GHz in real-time mode,
    /// as the published ConnectX-6 Dx `ibv_devinfo -vv` shows).
    pub fn clock_khz(&self) -> u64 {
        match self.clock {
            Clock::FreeRunning { khz } => khz,
            Clock::RealTime => 1_000_000,
        }
    }
}

fn knob_names() -> String {
    let names: Vec<&str> = KNOBS.iter().map(|(k, _)| *k).collect();
    format!("knobs: {}", names.join(", "))
}

fn profile_names() -> String {
    let names: Vec<&str> = PROFILES.iter().map(|(k, _)| *k).collect();
    names.join(", ")
}

impl fmt::Display for Knobs {
    /// The knobs that differ from the default, space-separated (empty for the default).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.changed().join(" "))
    }
}

impl ModelConfig {
    /// The device profile `name` ([`PROFILES`]); one line naming the profiles otherwise.
    pub fn profile(name: &str) -> Result<ModelConfig, String> {
        let mut cfg = ModelConfig::default();
        let cx5_behaviour = ["wqe_id=ring", "flush=late:2", "flush_ce=honour_ce", "zip=irregular:5"];
        let knobs: &[&str] = match name {
            "default" => &[],
            "cx5" => &cx5_behaviour,
            "cx6dx" => {
                cfg.identity = Identity::CONNECTX6DX;
                &[
                    "wqe_id=ring",
                    "flush=late:2",
                    "flush_ce=honour_ce",
                    "zip=irregular:6",
                    "clock=real-time",
                    "rq_ts_cap=rt",
                    "devx=full",
                ]
            }
            "cx7" => {
                cfg.identity = Identity::CONNECTX7;
                &[
                    "wqe_id=ring",
                    "flush=late:2",
                    "flush_ce=honour_ce",
                    "zip=irregular:7",
                    "err_counter=stride",
                    "clock=free-running:1000000",
                    "rq_ts_cap=fr_rt",
                    "devx=full",
                ]
            }
            "strict" => &[
                "wqe_id=ring",
                "err_counter=zero",
                "flush=late:3+partial:2",
                "flush_ce=honour_ce",
                "zip=irregular:11",
                "clock=real-time",
                "vlan_insert=off",
                "devx=absent",
                "flow_groups=reverse",
                "cq_overrun=error",
            ],
            _ => {
                return Err(format!(
                    "model profile {name:?}: no such profile (profiles: {})",
                    profile_names()
                ))
            }
        };
        cfg.profile = name.to_string();
        for k in knobs {
            cfg.knob(k).expect("a profile's knobs are valid");
        }
        Ok(cfg)
    }

    /// Sets one knob (`name=value`, [`KNOBS`]) and what follows from it in the device's caps.
    pub fn knob(&mut self, item: &str) -> Result<(), String> {
        self.knobs.set(item)?;
        if self.striding_rq.supported() {
            self.striding_rq.min_log_num_strides = if self.knobs.ext_strides { 3 } else { 9 };
        }
        Ok(())
    }

    /// The device `profile` names (the default device for None) with `knobs` applied in order.
    pub fn with_profile(profile: Option<&str>, knobs: &[String]) -> Result<ModelConfig, String> {
        let mut cfg = match profile {
            Some(p) => ModelConfig::profile(p)?,
            None => ModelConfig::default(),
        };
        for k in knobs.iter().flat_map(|k| k.split(',')).filter(|k| !k.trim().is_empty()) {
            cfg.knob(k)?;
        }
        Ok(cfg)
    }

    /// The profile's name and the knobs that differ from the default, as the trace's second line
    /// says them: `cx5 wqe_id=ring flush=late:2 ...`.
    pub fn behaviour(&self) -> String {
        let k = self.knobs.to_string();
        if k.is_empty() {
            self.profile.clone()
        } else {
            format!("{} {k}", self.profile)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_opens_and_the_default_is_the_model_as_it_was() {
        for (name, _) in PROFILES {
            let cfg = ModelConfig::profile(name).unwrap();
            assert_eq!(cfg.profile, *name);
        }
        let d = ModelConfig::profile("default").unwrap();
        assert_eq!(d.knobs, Knobs::default());
        assert_eq!(d.behaviour(), "default");
        let s = ModelConfig::profile("strict").unwrap();
        assert_eq!(s.striding_rq.min_log_num_strides, 3);
        assert!(s
            .behaviour()
            .starts_with("strict wqe_id=ring err_counter=zero flush=late:3+partial:2"));
    }

    #[test]
    fn knobs_parse_print_and_refuse_in_one_line() {
        let mut k = Knobs::default();
        for item in [
            "wqe_id=ring",
            "flush=late:3+partial:2",
            "zip=irregular:9",
            "clock=free-running:1000000",
            "link=pause:50",
            "flow_groups=reverse",
            "wire_drop=1000",
            "wire_dup=700",
            "wire_swap=300",
        ] {
            k.set(item).unwrap();
            assert!(k.items().iter().any(|i| i == item), "{item}");
        }
        for bad in [
            "wqe_id",
            "nope=1",
            "wqe_id=sometimes",
            "flush=late:0",
            "clock=free-running:0",
            "zip=irregular:x",
            "wire_swap=1",
            "wire_drop=-1",
            "wire_dup=x",
        ] {
            let e = k.set(bad).unwrap_err();
            assert!(!e.contains('\n') && e.starts_with("model knob"), "{e}");
        }
        let e = ModelConfig::profile("cx9").unwrap_err();
        assert!(e.contains("cx5, cx6dx, cx7, strict"), "{e}");
        let c = ModelConfig::with_profile(Some("cx5"), &["ext_strides=off,vlan_insert=off".into()]).unwrap();
        assert_eq!(c.striding_rq.min_log_num_strides, 9);
        assert!(!c.knobs.vlan_insert);
        assert_eq!(
            (k.wire.drop_every, k.wire.duplicate_every, k.wire.swap_every),
            (1000, 700, 300)
        );
    }
}
