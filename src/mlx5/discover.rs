//! Which RDMA device and port a spec names, found the way VPP's `rdma_create_if` and DPDK's
//! `mlx5_os.c` do it: through sysfs. A netdev and its RDMA device share a PCI function, so
//! `<ibdev_path>/device` (a symlink to the PCI device) lists the netdev under `net/`, and the
//! link's basename is the PCI address.

use std::path::{Path, PathBuf};

use crate::sys::rdma::{DeviceList, Rdma};
use crate::text::echo;
use crate::Error;

/// One RDMA device as sysfs shows it.
#[derive(Clone, Debug)]
pub(crate) struct Found {
    /// Index in the device list.
    pub index: usize,
    pub ibdev: String,
    pub ibdev_path: PathBuf,
    pub pci: Option<String>,
    pub netdevs: Vec<String>,
    pub dv_supported: bool,
}

impl Found {
    fn netdev_dir(&self, netdev: &str) -> PathBuf {
        self.ibdev_path.join("device/net").join(netdev)
    }

    /// The file of a sysfs attribute of the netdev.
    pub(super) fn netdev_path(&self, netdev: &str, attr: &str) -> PathBuf {
        self.netdev_dir(netdev).join(attr)
    }

    /// A sysfs attribute of the netdev, trimmed.
    pub(super) fn netdev_attr(&self, netdev: &str, attr: &str) -> Option<String> {
        std::fs::read_to_string(self.netdev_dir(netdev).join(attr))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// The PCI device id (`<ibdev_path>/device/device`, e.g. 0x1017 for a ConnectX-5).
    pub(super) fn pci_device_id(&self) -> Option<u16> {
        let s = std::fs::read_to_string(self.ibdev_path.join("device/device")).ok()?;
        u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
    }

    /// `mlx5_0/1 (mdl0, 0000:3b:00.0)`.
    fn summary(&self) -> String {
        let mut s = format!("{}/1", self.ibdev);
        let mut extra = self.netdevs.clone();
        extra.extend(self.pci.clone());
        if !extra.is_empty() {
            s += &format!(" ({})", extra.join(", "));
        }
        s
    }
}

fn scan_one(index: usize, ibdev: String, ibdev_path: &str, dv_supported: bool) -> Found {
    let ibdev_path = PathBuf::from(ibdev_path);
    let dev = ibdev_path.join("device");
    let pci = std::fs::read_link(&dev)
        .ok()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()));
    let mut netdevs: Vec<String> = std::fs::read_dir(dev.join("net"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    netdevs.sort();
    Found {
        index,
        ibdev,
        ibdev_path,
        pci,
        netdevs,
        dv_supported,
    }
}

/// Every RDMA device libibverbs knows, with its netdevs and PCI address.
pub(crate) fn scan(list: &DeviceList) -> Vec<Found> {
    (0..list.len())
        .map(|i| {
            let d = list.info(i);
            scan_one(i, d.name, &d.ibdev_path, d.dv_supported)
        })
        .collect()
}

/// The port's `out_of_buffer` queue counter: frames dropped because a receive queue had no
/// posted buffer (mlx5_ib `hw_counters`, `drivers/infiniband/hw/mlx5/counters.c`
/// `out_of_buffer`; the same counter as ethtool's `rx_out_of_buffer` for the netdev's queues).
pub(crate) fn out_of_buffer_path(dev: &Found, port: u8) -> PathBuf {
    dev.ibdev_path.join(format!("ports/{port}/hw_counters/out_of_buffer"))
}

/// A sysfs counter file's value.
pub(crate) fn read_counter(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// What a spec's name part asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `mlx5_0/1`: an RDMA device and a port number (from 1).
    Ibdev { name: String, port: u8 },
    /// `ens1f0`: a netdev whose RDMA device is looked up.
    Netdev(String),
}

pub(crate) fn parse_target(kind: &str, rest: &str) -> Result<Target, Error> {
    if rest.is_empty() {
        return Err(Error::spec(format!(
            "{kind}: needs a netdev or an RDMA device and port, e.g. {kind}:ens1f0 or {kind}:mlx5_0/1"
        )));
    }
    match rest.split_once('/') {
        Some((name, port)) => {
            let port = match port.parse::<u8>() {
                Ok(p) if p >= 1 => p,
                _ => {
                    return Err(Error::spec(format!(
                        "{kind}:{}: port `{}` must be a number from 1 (RDMA ports count from 1)",
                        echo(rest),
                        echo(port)
                    )))
                }
            };
            if name.is_empty() {
                return Err(Error::spec(format!("{kind}:{}: empty RDMA device name", echo(rest))));
            }
            Ok(Target::Ibdev {
                name: name.to_string(),
                port,
            })
        }
        None => Ok(Target::Netdev(rest.to_string())),
    }
}

/// The device and port `target` names, and the netdev on that port (if any).
pub(crate) fn find(found: &[Found], target: &Target, spec: &str) -> Result<(Found, u8, Option<String>), Error> {
    let hit = match target {
        Target::Ibdev { name, port } => found.iter().find(|f| f.ibdev == *name).map(|f| {
            // mlx5 has one port per PCI function; a multi-port device (mlx4) lists one netdev
            // per port, whose `dev_port` (from 0) says which.
            let nd = f
                .netdevs
                .iter()
                .find(|n| f.netdev_attr(n, "dev_port").and_then(|p| p.parse::<u8>().ok()) == Some(port - 1))
                .or(f.netdevs.first())
                .cloned();
            (f.clone(), *port, nd)
        }),
        Target::Netdev(nd) => found.iter().find(|f| f.netdevs.contains(nd)).map(|f| {
            let port = f
                .netdev_attr(nd, "dev_port")
                .and_then(|p| p.parse::<u8>().ok())
                .map_or(1, |p| p + 1);
            (f.clone(), port, Some(nd.clone()))
        }),
    };
    hit.ok_or_else(|| Error::device(no_such_device(found, target, spec)))
}

fn no_such_device(found: &[Found], target: &Target, spec: &str) -> String {
    let what = match target {
        Target::Ibdev { name, .. } => format!("no RDMA device named `{}`", echo(name)),
        Target::Netdev(nd) if Path::new("/sys/class/net").join(nd).exists() => {
            format!(
                "network interface {} has no RDMA device (not a ConnectX port, or mlx5_ib is not loaded)",
                echo(nd)
            )
        }
        Target::Netdev(nd) => format!("no RDMA device for a network interface named `{}`", echo(nd)),
    };
    if found.is_empty() {
        format!("{spec}: {what}; libibverbs sees no RDMA devices at all (is the mlx5_ib kernel module loaded?)")
    } else {
        let list: Vec<String> = found.iter().map(Found::summary).collect();
        format!("{spec}: {what}; devices present: {}", list.join(", "))
    }
}

/// For tests and `describe`: every device as `mlx5_0/1 (mdl0, 0000:3b:00.0)`.
pub(crate) fn list_devices(rdma: &Rdma) -> Result<Vec<String>, Error> {
    let list = DeviceList::get(rdma).map_err(|e| Error::device(e.to_string()).caused_by(e.into()))?;
    Ok(scan(&list).iter().map(Found::summary).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("mlx5", "mlx5_0/1").unwrap(),
            Target::Ibdev {
                name: "mlx5_0".into(),
                port: 1
            }
        );
        assert_eq!(parse_target("mlx5", "ens1f0").unwrap(), Target::Netdev("ens1f0".into()));
        for bad in ["", "mlx5_0/0", "mlx5_0/x", "/1"] {
            assert!(parse_target("mlx5", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn missing_device_lists_what_exists() {
        let f = Found {
            index: 0,
            ibdev: "mlx5_0".into(),
            ibdev_path: "/nonexistent".into(),
            pci: Some("0000:3b:00.0".into()),
            netdevs: vec!["mdl0".into()],
            dv_supported: true,
        };
        let e = find(&[f], &Target::Netdev("eth9".into()), "mlx5:eth9")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mlx5_0/1 (mdl0, 0000:3b:00.0)"), "{e}");
        let e = find(&[], &Target::Netdev("eth9".into()), "mlx5:eth9")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no RDMA devices at all"), "{e}");
    }
}
