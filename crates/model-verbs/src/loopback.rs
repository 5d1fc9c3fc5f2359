//! Local loopback of a device's port, switched as mlx5_ib switches it
//! (drivers/infiniband/hw/mlx5/main.c `mlx5_ib_enable_lb` / `mlx5_ib_disable_lb`): the vport's
//! local loopback starts off (mlx5_core `mlx5_core_set_hca_defaults`) and goes on when a
//! second user transport domain exists (every open context allocates one,
//! `mlx5_ib_alloc_transport_domain`, on a device with `log_max_transport_domain`, as a
//! ConnectX-5) or when a QP's TIR asks for self-loopback (`create_raw_packet_qp_tir` /
//! `create_rss_raw_qp_tir` with `MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC`/`_MC`); it goes off when
//! only one domain and no such QP are left. The counts and the state are kept as the kernel
//! keeps them, transitions included.

use std::sync::Mutex;

use crate::global::{Global, DEVS};

#[derive(Clone, Copy)]
struct Lb {
    user_td: u32,
    qps: u32,
    enabled: bool,
}

static LB: Mutex<[Lb; DEVS.len()]> = Mutex::new(
    [Lb {
        user_td: 0,
        qps: 0,
        enabled: false,
    }; DEVS.len()],
);

/// `mlx5_ib_enable_lb(dev, td, qp)`.
pub(crate) fn enable(g: &Global, port: usize, td: bool, qp: bool) {
    let mut all = crate::objects::lock(&LB);
    let lb = &mut all[port];
    lb.user_td += u32::from(td);
    lb.qps += u32::from(qp);
    if (lb.user_td == 2 || lb.qps == 1) && !lb.enabled {
        g.nic.set_local_lb(port, true);
        lb.enabled = true;
    }
}

/// `mlx5_ib_disable_lb(dev, td, qp)`.
pub(crate) fn disable(g: &Global, port: usize, td: bool, qp: bool) {
    let mut all = crate::objects::lock(&LB);
    let lb = &mut all[port];
    lb.user_td = lb.user_td.saturating_sub(u32::from(td));
    lb.qps = lb.qps.saturating_sub(u32::from(qp));
    if lb.user_td == 1 && lb.qps == 0 && lb.enabled {
        g.nic.set_local_lb(port, false);
        lb.enabled = false;
    }
}
