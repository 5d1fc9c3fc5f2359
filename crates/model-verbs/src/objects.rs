//! The model's verbs objects: each one starts with the rdma-core struct C code sees, so the
//! pointer handed out is the bookkeeping's address (`#[repr(C)]`, first field).

use std::collections::HashMap;
use std::mem::offset_of;
use std::sync::{Mutex, MutexGuard};

use mlx5_model::QueueMem;

use crate::ring::{CompRing, RecvRing, SendRing};
use rawpkt_sys::region::Region;
use rdma_abi::*;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open device: rdma-core allocates a provider context that embeds `struct verbs_context`,
/// whose last field is the `struct ibv_context` handed out (libibverbs `verbs_init_context`).
#[repr(C)]
pub(crate) struct Context {
    pub vctx: verbs_context,
    /// Which model port (device) this context is.
    pub port: usize,
    /// The CQ UAR page (`mlx5dv_cq.cq_uar`): arm doorbells land here; the model never raises
    /// completion events, so nothing reads it.
    pub cq_uar: Region,
    /// The CQ UAR's address, where `mlx5dv_init_obj@MLX5_1.0` points `cq_uar` (that ABI
    /// returned a `void **`).
    pub cq_uar_reg: *mut std::ffi::c_void,
    /// The context's transport domain (mlx5_ib allocates one per ucontext): its QPs' TISes and
    /// TIRs are in it, which decides what is self-loopback.
    pub td: u32,
}

impl Context {
    /// The bookkeeping of a context pointer (`container_of`, as `verbs_get_ctx` computes it).
    pub fn from_ctx(ctx: *mut ibv_context) -> *mut Context {
        ctx.cast::<u8>()
            .wrapping_sub(offset_of!(verbs_context, context))
            .cast::<Context>()
    }
}

#[repr(C)]
pub(crate) struct Pd {
    pub pd: ibv_pd,
    pub port: usize,
    /// The device's number for the PD (`mlx5dv_pd.pdn`, what DevX commands name it by).
    pub pdn: u32,
}

#[repr(C)]
pub(crate) struct Mr {
    pub mr: ibv_mr,
}

/// Consumer side of a CQ for `ibv_poll_cq`, and which queues complete to it.
pub(crate) struct CqPoll {
    pub ring: CompRing,
    pub ci: u32,
    /// Raw QPs by QPN and WQs by number that complete here (for their `wr_id`s).
    pub sqs: HashMap<u32, *mut Qp>,
    pub wqs: HashMap<u32, *mut Wq>,
    /// The completion `ibv_start_poll`/`ibv_next_poll` took, which the `ibv_wc_read_*` ops read.
    pub cur: Option<crate::datapath::Polled>,
}

/// A CQ is an `ibv_cq_ex` (mlx5dv_create_cq returns one; `ibv_cq_ex_to_cq` is a cast), whose
/// first fields are `struct ibv_cq`.
#[repr(C)]
pub(crate) struct Cq {
    pub cq: ibv_cq_ex,
    pub port: usize,
    pub info: QueueMem,
    pub poll: Mutex<CqPoll>,
}

/// Send side of a raw QP, in rdma-core's terms (`struct mlx5_wq` of the SQ).
pub(crate) struct SqTx {
    pub ring: SendRing,
    /// Next WQEBB (free-running, `sq.cur_post`).
    pub pi: u32,
    /// WRs posted and completed (`sq.head`, `sq.tail`).
    pub head: u32,
    pub tail: u32,
    /// Per WQEBB slot: the WR's id and the head after it (`sq.wrid`, `sq.wqe_head`).
    pub wrid: Vec<u64>,
    pub wqe_head: Vec<u32>,
    /// WRs the ring holds (`sq.max_post`), gather entries per WR, inline bytes per WR.
    pub max_post: u32,
    pub max_gs: u32,
    pub max_inline: u32,
    pub sig_all: bool,
    /// `qp_state_max_gs`: the QP has reached RTS since its last reset (rdma-core
    /// `set_qp_operational_state`); before that every post fails with ENOMEM.
    pub operational: bool,
}

/// The receive queue of a RAW_PACKET QP created with `max_recv_wr > 0`: as mlx5_ib builds it
/// (`create_raw_packet_qp`), an RQ and a TIR over it alone, which flows attached to the QP
/// deliver to. The RQ is a [`Wq`] the application never sees.
pub(crate) struct OwnRq {
    pub wq: Box<Wq>,
    pub tir: usize,
}

// One per QP, boxed inside the Qp: the size of the RSS variant saves nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum QpKind {
    /// A RAW_PACKET QP with a send queue, and its own receive queue when it was asked for.
    Raw {
        sq: QueueMem,
        send_cq: *mut Cq,
        tx: Mutex<SqTx>,
        rq: Option<OwnRq>,
    },
    /// An RSS QP: a TIR over an indirection table.
    Rss { tir: usize },
}

#[repr(C)]
pub(crate) struct Qp {
    pub qp: ibv_qp,
    pub port: usize,
    pub kind: QpKind,
    /// The capabilities create returned and `sq_sig_all`, for `ibv_query_qp`.
    pub cap: ibv_qp_cap,
    pub sq_sig_all: i32,
    /// The self-loopback bits of the QP's TIR (`mlx5_model::TIR_SELF_LB_*`), from
    /// `mlx5dv_create_qp`'s ALLOW_SELF_LOOPBACK flags; 0 also for a QP without a TIR.
    pub self_lb: u8,
}

/// Receive side of a WQ (`struct mlx5_rwq`'s `rq`).
pub(crate) struct RqRx {
    pub ring: RecvRing,
    pub head: u32,
    pub tail: u32,
    pub wrid: Vec<u64>,
}

#[repr(C)]
pub(crate) struct Wq {
    pub wq: ibv_wq,
    pub port: usize,
    pub info: QueueMem,
    pub cq: *mut Cq,
    pub rx: Mutex<RqRx>,
    /// `ibv_wc.qp_num` of its completions: the WQ number, or the QP's for a QP's own RQ.
    pub wc_qp_num: u32,
    /// Made striding (`mlx5dv_create_wq`): its WQEs are written and its completions read through
    /// Direct Verbs only (`post_rq` refuses it).
    pub striding: bool,
}

#[repr(C)]
pub(crate) struct IndTable {
    pub t: ibv_rwq_ind_table,
    pub wqs: Vec<*mut Wq>,
}

#[repr(C)]
pub(crate) struct Flow {
    pub f: ibv_flow,
    pub id: u64,
}
