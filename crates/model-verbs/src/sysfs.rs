//! The fake sysfs tree, shaped like the kernel's, that the devices' `ibdev_path`/`dev_path`
//! point into, so the binding maps netdev <-> ibdev with the same code as on a real machine:
//!
//! ```text
//! <root>/class/infiniband/mlx5_0/device -> <root>/devices/pci0000:3a/0000:3b:00.0
//! <root>/class/infiniband/mlx5_0/{node_type,fw_ver,hca_type,ports/1/{state,link_layer,rate,hw_counters/out_of_buffer}}
//! <root>/class/infiniband_verbs/uverbs0/{ibdev,abi_version,device -> same PCI dir}
//! <root>/class/net/mdl0 -> <root>/devices/pci0000:3a/0000:3b:00.0/net/mdl0
//! <root>/devices/pci0000:3a/0000:3b:00.0/{vendor,device,subsystem_vendor,subsystem_device,class,uevent,numa_node,driver -> <root>/bus/pci/drivers/mlx5_core}
//! <root>/devices/pci0000:3a/0000:3b:00.0/net/mdl0/{address,operstate,mtu,speed,ifindex,dev_port,dev_id,device}
//! ```

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::global::DEVS;

fn write(p: &Path, s: &str) -> Result<(), String> {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    fs::write(p, s).map_err(|e| format!("{}: {e}", p.display()))
}

fn link(target: &Path, at: &Path) -> Result<(), String> {
    if let Some(d) = at.parent() {
        fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    symlink(target, at).map_err(|e| format!("{} -> {}: {e}", at.display(), target.display()))
}

/// The PCI identity of a ConnectX-5 function as the kernel shows it: vendor Mellanox (0x15b3),
/// class Ethernet controller (0x020000), subsystem 0x15b3:0x0007 (a ConnectX-5 EN card's, as
/// `lspci -nn -vv` of one shows it).
const PCI_VENDOR: u16 = 0x15b3;
const PCI_CLASS: u32 = 0x02_0000;
const PCI_SUBSYS: (u16, u16) = (0x15b3, 0x0007);

/// Writes a PCI function's identity files: `vendor`, `device`, `subsystem_*`, `class` (the
/// kernel's `pci_dev_attrs`, `0x%04x`/`0x%06x`), and `uevent`, whose variables are the driver
/// core's `DRIVER=` (drivers/base/core.c `dev_uevent`) then the PCI bus's (`pci_uevent`,
/// drivers/pci/pci-driver.c): PCI_CLASS, PCI_ID, PCI_SUBSYS_ID, PCI_SLOT_NAME, MODALIAS. DPDK's
/// mlx5 PMD matches a PCI device to its ibdev by `<ibdev>/device/uevent`'s PCI_SLOT_NAME
/// (`mlx5_get_pci_addr`, drivers/common/mlx5/linux/mlx5_common_os.c). Called again when the
/// `pci_device` knob changes the device id.
pub(crate) fn write_pci_identity(pci: &Path, slot: &str, device: u16) -> Result<(), String> {
    let (sv, sd) = PCI_SUBSYS;
    write(&pci.join("vendor"), &format!("0x{PCI_VENDOR:04x}\n"))?;
    write(&pci.join("device"), &format!("0x{device:04x}\n"))?;
    write(&pci.join("subsystem_vendor"), &format!("0x{sv:04x}\n"))?;
    write(&pci.join("subsystem_device"), &format!("0x{sd:04x}\n"))?;
    write(&pci.join("class"), &format!("0x{PCI_CLASS:06x}\n"))?;
    let [bc, sc, pi] = [(PCI_CLASS >> 16) as u8, (PCI_CLASS >> 8) as u8, PCI_CLASS as u8];
    let uevent = format!(
        "DRIVER=mlx5_core\nPCI_CLASS={PCI_CLASS:04X}\nPCI_ID={PCI_VENDOR:04X}:{device:04X}\n\
         PCI_SUBSYS_ID={sv:04X}:{sd:04X}\nPCI_SLOT_NAME={slot}\n\
         MODALIAS=pci:v{v:08X}d{d:08X}sv{sv32:08X}sd{sd32:08X}bc{bc:02X}sc{sc:02X}i{pi:02X}\n",
        v = u32::from(PCI_VENDOR),
        d = u32::from(device),
        sv32 = u32::from(sv),
        sd32 = u32::from(sd),
    );
    write(&pci.join("uevent"), &uevent)
}

/// The port's `out_of_buffer` queue counter under a device's directory: frames dropped for want
/// of a posted receive buffer (the kernel's mlx5_ib `hw_counters`, `mlx5_ib_q_counters`).
pub(crate) const OUT_OF_BUFFER: &str = "ports/1/hw_counters/out_of_buffer";

const PREFIX: &str = "rawpkt-model-sysfs-";
/// The lock file each process holds (flock, exclusive) in its tree for as long as it lives.
const LOCK: &str = ".owner.lock";

/// Takes an exclusive flock on `dir`'s lock file: held (the fd stays open, close-on-exec) for
/// the life of the process when `wait` is false and it succeeds. The kernel drops it when the
/// process dies however it dies, SIGKILL included, in whatever pid namespace.
fn lock_tree(dir: &Path, create: bool) -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(dir.join(LOCK))
        .ok()?;
    // SAFETY: flock on an fd this function owns.
    (unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0).then_some(f)
}

/// Removes the trees of processes that died without removing theirs (a SIGKILL skips atexit):
/// a tree whose lock nobody holds. A tree with no lock file yet is being written (or its writer
/// died within its first instants): left alone unless it is a minute old.
fn remove_stale_trees(tmp: &Path) {
    let Ok(dir) = fs::read_dir(tmp) else { return };
    for e in dir.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with(PREFIX) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = e.path();
        let stale = if path.join(LOCK).exists() {
            lock_tree(&path, false).is_some()
        } else {
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age.as_secs() > 60))
        };
        if stale {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// Writes the tree in a fresh directory of the temp dir (once per process) and returns it,
/// after removing the trees dead processes left behind.
pub(crate) fn create(id: &mlx5_model::profile::Identity) -> Result<PathBuf, String> {
    let tmp = std::env::temp_dir();
    remove_stale_trees(&tmp);
    let root = tmp.join(format!("{PREFIX}{}", std::process::id()));
    // A previous process with our pid (pid reuse) may have left one behind.
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    // Held until the process ends: the fd is leaked on purpose.
    let lock = lock_tree(&root, true).ok_or_else(|| format!("{}: cannot lock {LOCK}", root.display()))?;
    std::mem::forget(lock);
    let driver = root.join("bus/pci/drivers/mlx5_core");
    fs::create_dir_all(&driver).map_err(|e| format!("{}: {e}", driver.display()))?;
    for (port, d) in DEVS.iter().enumerate() {
        let pci = root.join("devices/pci0000:3a").join(d.pci);
        write_pci_identity(&pci, d.pci, id.pci_device_id)?;
        // One NUMA node, as a single-socket host's functions show it.
        write(&pci.join("numa_node"), "0\n")?;
        link(&driver, &pci.join("driver"))?;
        let net = pci.join("net").join(d.netdev);
        let mac = d.mac.map(|b| format!("{b:02x}")).join(":");
        write(&net.join("address"), &format!("{mac}\n"))?;
        write(&net.join("operstate"), "up\n")?;
        write(&net.join("mtu"), "1500\n")?;
        write(&net.join("speed"), "100000\n")?;
        write(&net.join("ifindex"), &format!("{}\n", d.ifindex))?;
        // Each function is its own netdev on its own port: mlx5e gives every PF's netdev
        // dev_port 0 and dev_id 0 (`net-sysfs.c` prints them `%d` and `%#x`). The PMD picks the
        // netdev of an ibdev as the one with dev_port 0 under `<ibdev>/device/net/`
        // (`mlx5_get_ifname_sysfs`, drivers/common/mlx5/linux/mlx5_common_os.c).
        write(&net.join("dev_port"), "0\n")?;
        write(&net.join("dev_id"), "0x0\n")?;
        link(&pci, &net.join("device"))?;
        link(&net, &root.join("class/net").join(d.netdev))?;

        let ib = root.join("class/infiniband").join(d.ibdev);
        link(&pci, &ib.join("device"))?;
        write(&ib.join("node_type"), "1: CA\n")?;
        write(&ib.join("fw_ver"), &format!("{}\n", id.fw_ver))?;
        write(&ib.join("hca_type"), &format!("{}\n", id.hca_type))?;
        write(&ib.join("ports/1/state"), "4: ACTIVE\n")?;
        write(&ib.join("ports/1/phys_state"), "5: LinkUp\n")?;
        write(&ib.join("ports/1/link_layer"), "Ethernet\n")?;
        write(&ib.join("ports/1/rate"), "100 Gb/sec (4X EDR)\n")?;
        // Kept up to date by the model (`Nic::publish_out_of_buffer`, from `global::init`).
        write(&ib.join(OUT_OF_BUFFER), "0\n")?;
        // What ibv_devinfo (board_id) and GID readers take from sysfs; the GID table's
        // populated entries with their RoCE types and netdevs (ports/1/gid_attrs).
        let guid = |g| format!("{}\n", crate::device::guid_str(g));
        write(&ib.join("board_id"), &format!("{}\n", crate::device::BOARD_ID))?;
        write(&ib.join("node_guid"), &guid(crate::device::node_guid(port)))?;
        write(&ib.join("sys_image_guid"), &guid(crate::device::sys_image_guid(port)))?;
        write(&ib.join("node_desc"), &format!("rawpkt model {}\n", d.ibdev))?;
        write(&ib.join("hw_rev"), "0x0\n")?;
        for i in 0..crate::device::GID_TABLE_LEN {
            let Some((raw, t)) = crate::device::gid(port, i) else {
                continue;
            };
            let g: Vec<String> = raw.chunks(2).map(|c| format!("{:02x}{:02x}", c[0], c[1])).collect();
            write(&ib.join(format!("ports/1/gids/{i}")), &format!("{}\n", g.join(":")))?;
            let ty = if t == rdma_abi::IBV_GID_TYPE_ROCE_V2 {
                "RoCE v2"
            } else {
                "IB/RoCE v1"
            };
            write(&ib.join(format!("ports/1/gid_attrs/types/{i}")), &format!("{ty}\n"))?;
            write(
                &ib.join(format!("ports/1/gid_attrs/ndevs/{i}")),
                &format!("{}\n", d.netdev),
            )?;
        }
        fs::create_dir_all(pci.join("infiniband").join(d.ibdev)).map_err(|e| e.to_string())?;

        let uv = root.join("class/infiniband_verbs").join(d.uverbs);
        write(&uv.join("ibdev"), &format!("{}\n", d.ibdev))?;
        write(&uv.join("abi_version"), "1\n")?;
        link(&pci, &uv.join("device"))?;
    }
    // Removed at exit (a process killed by a signal leaves it; the next process to start the
    // model removes it, its lock being free).
    // SAFETY: registering a plain extern "C" fn with no arguments; it runs at normal exit.
    unsafe { libc::atexit(remove_at_exit) };
    Ok(root)
}

extern "C" fn remove_at_exit() {
    let root = std::env::temp_dir().join(format!("{PREFIX}{}", std::process::id()));
    let _ = std::panic::catch_unwind(|| fs::remove_dir_all(root));
}
