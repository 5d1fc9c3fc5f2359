//! The fake sysfs tree, shaped like the kernel's, that the devices' `ibdev_path`/`dev_path`
//! point into, so the binding maps netdev <-> ibdev with the same code as on a real machine:
//!
//! ```text
//! <root>/class/infiniband/mlx5_0/device -> <root>/devices/pci0000:3a/0000:3b:00.0
//! <root>/class/infiniband/mlx5_0/{node_type,fw_ver,hca_type,ports/1/{state,link_layer,rate}}
//! <root>/class/infiniband_verbs/uverbs0/{ibdev,abi_version,device -> same PCI dir}
//! <root>/class/net/mdl0 -> <root>/devices/pci0000:3a/0000:3b:00.0/net/mdl0
//! <root>/devices/pci0000:3a/0000:3b:00.0/{vendor,device,driver -> <root>/bus/pci/drivers/mlx5_core}
//! <root>/devices/pci0000:3a/0000:3b:00.0/net/mdl0/{address,operstate,mtu,speed,ifindex,device}
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

/// Writes the tree in a fresh directory of the temp dir (once per process) and returns it.
pub(crate) fn create() -> Result<PathBuf, String> {
    let root = std::env::temp_dir().join(format!("rawpkt-model-sysfs-{}", std::process::id()));
    // A previous process with our pid (pid reuse) may have left one behind.
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let driver = root.join("bus/pci/drivers/mlx5_core");
    fs::create_dir_all(&driver).map_err(|e| format!("{}: {e}", driver.display()))?;
    for (port, d) in DEVS.iter().enumerate() {
        let pci = root.join("devices/pci0000:3a").join(d.pci);
        write(&pci.join("vendor"), "0x15b3\n")?;
        write(&pci.join("device"), "0x1017\n")?;
        link(&driver, &pci.join("driver"))?;
        let net = pci.join("net").join(d.netdev);
        let mac = d.mac.map(|b| format!("{b:02x}")).join(":");
        write(&net.join("address"), &format!("{mac}\n"))?;
        write(&net.join("operstate"), "up\n")?;
        write(&net.join("mtu"), "1500\n")?;
        write(&net.join("speed"), "100000\n")?;
        write(&net.join("ifindex"), &format!("{}\n", d.ifindex))?;
        link(&pci, &net.join("device"))?;
        link(&net, &root.join("class/net").join(d.netdev))?;

        let ib = root.join("class/infiniband").join(d.ibdev);
        link(&pci, &ib.join("device"))?;
        write(&ib.join("node_type"), "1: CA\n")?;
        write(&ib.join("fw_ver"), "16.35.2000\n")?;
        write(&ib.join("hca_type"), "MT4119\n")?;
        write(&ib.join("ports/1/state"), "4: ACTIVE\n")?;
        write(&ib.join("ports/1/phys_state"), "5: LinkUp\n")?;
        write(&ib.join("ports/1/link_layer"), "Ethernet\n")?;
        write(&ib.join("ports/1/rate"), "100 Gb/sec (4X EDR)\n")?;
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
    // Removed at exit (a process killed by a signal leaves it; the next one with the same pid
    // replaces it).
    // SAFETY: registering a plain extern "C" fn with no arguments; it runs at normal exit.
    unsafe { libc::atexit(remove_at_exit) };
    Ok(root)
}

extern "C" fn remove_at_exit() {
    let root = std::env::temp_dir().join(format!("rawpkt-model-sysfs-{}", std::process::id()));
    let _ = std::panic::catch_unwind(|| fs::remove_dir_all(root));
}
