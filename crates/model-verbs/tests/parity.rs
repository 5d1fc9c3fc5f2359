//! Where the model library answers as rdma-core 44, the kernel and a ConnectX-5 do for what
//! DPDK's mlx5 PMD and other programs nobody here wrote rely on: one check of
//! `tests/c/parity.c` (compiled against rdma-core's headers, linked against the library) per
//! test. Each failed before the library answered that way.

mod cprog;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

fn check(name: &str) {
    // Built once, whichever test comes first (they run in parallel).
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    let run = Command::new(EXE.get_or_init(|| cprog::build_c("parity")))
        .arg(name)
        .output()
        .expect("running the C program");
    let (out, err) = (
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
    );
    assert!(run.status.success(), "parity {name} failed:\n{out}{err}");
    assert!(out.contains(&format!("{name} ok")), "{out}{err}");
}

/// `<ibdev>/device/uevent` names the PCI function (DPDK `mlx5_get_pci_addr` matches PCI devices
/// to ibdevs by its PCI_SLOT_NAME) and the netdev under it has `dev_port` 0.
#[test]
#[ignore = "needs rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn uevent_names_the_pci_function() {
    check("uevent");
}

/// `mlx5dv_dr_action_create_dest_ibv_qp` and `mlx5dv_dr_action_destroy`, which DPDK's PMD calls
/// for its drop queue and every hash RX queue even without software steering.
#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn dr_actions_on_qps() {
    check("dr_action");
}

/// `MLX5DV_QP_MASK_UAR_MMAP_OFFSET`, and what the offset means: `cmd_fd` mapped there is the
/// QP's doorbell page.
#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn uar_mmap_offset_maps_the_doorbell_page() {
    check("uar");
}

/// A CQ whose consumer index is published as a 16-bit counter (DPDK's TX CQs) goes on past the
/// counter's wrap: the device compares the bits that tell a full ring from an empty one.
#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn cq_with_a_16_bit_consumer_index() {
    check("cq_ci16");
}

/// `ibv_create_wq` leaves the caller's attr alone, so the same attr makes a second WQ.
#[test]
#[ignore = "needs rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn create_wq_leaves_the_attr_alone() {
    check("wq_attr");
}

/// `mlx5dv_init_obj` with `MLX5DV_OBJ_PD`: the PD's number.
#[test]
#[ignore = "needs rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn init_obj_gives_the_pdn() {
    check("pd");
}

/// `MLX_CQ_ALLOC_TYPE=HUGE` with no free huge pages fails CQ creation, as libmlx5's allocation
/// does; `PREFER_HUGE` falls back.
#[test]
#[ignore = "needs rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn huge_cq_buffers_need_huge_pages() {
    check("cq_huge");
}

/// The DevX that DPDK's PMD uses beside verbs queues (with `dv_flow_en=0`): capability pages
/// (and the PRM's bad-parameter status for one the device lacks), a transport domain, a TIS, a
/// UAR mappable from `cmd_fd`, and QUERY_TIS on a raw QP's TIS (one transport domain per
/// context).
#[test]
#[ignore = "needs root (CAP_NET_RAW: the C program creates RAW_PACKET QPs), rdma-core's headers (libibverbs-dev) and a C compiler (gcc); scripts/test.sh installs them as root"]
fn devx_beside_verbs_queues() {
    check("devx");
}
