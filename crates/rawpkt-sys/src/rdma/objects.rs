//! Safe owners of verbs objects. Each holds an `Arc` of what it was created from, so the
//! destruction order rdma-core and the kernel require (flow before its QP, QP before its CQs and
//! indirection table, table before its WQs, everything before the PD, the PD before the
//! context; VPP `rdma_dev_cleanup`) follows from the reference counts: nothing can be destroyed
//! while something built on it lives.
#![allow(unsafe_code)]

use std::ffi::{c_int, CStr};
use std::sync::Arc;

use rdma_abi::*;

use super::load::Rdma;
use super::ops;

/// A verbs call that failed: which call and the errno it left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallError {
    pub call: &'static str,
    pub errno: i32,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed: {}",
            self.call,
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

/// The errno alone, for an error's source (the call's name goes in the words around it).
impl From<CallError> for std::io::Error {
    fn from(e: CallError) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.errno)
    }
}

fn last_errno(call: &'static str) -> CallError {
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    // A provider that returns NULL without setting errno: say so rather than report "success".
    CallError {
        call,
        errno: if errno == 0 { libc::EIO } else { errno },
    }
}

fn check(call: &'static str, ret: c_int) -> Result<(), CallError> {
    if ret == 0 {
        Ok(())
    } else {
        // Verbs return either an errno or -1 with errno set (the compat entries).
        Err(if ret > 0 {
            CallError { call, errno: ret }
        } else {
            last_errno(call)
        })
    }
}

/// What `ibv_get_device_list` returned: name, the sysfs paths, and whether mlx5dv drives it.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub name: String,
    pub ibdev_path: String,
    pub dv_supported: bool,
}

/// The device list, freed on drop (devices stay valid while a context opened on them lives).
pub struct DeviceList<'a> {
    rdma: &'a Rdma,
    list: *mut *mut ibv_device,
    n: usize,
}

impl<'a> DeviceList<'a> {
    pub fn get(rdma: &'a Rdma) -> Result<DeviceList<'a>, CallError> {
        let mut n: c_int = 0;
        // SAFETY: exported function; n is a valid out pointer.
        let list = unsafe { (rdma.ibv.get_device_list)(&mut n) };
        if list.is_null() {
            let e = last_errno("ibv_get_device_list");
            // ENOSYS: the kernel has no RDMA support loaded (no ib_uverbs), which for a caller
            // looking for a device is the same as no devices (ibv_get_device_list.3).
            if e.errno == libc::ENOSYS {
                return Ok(DeviceList {
                    rdma,
                    list: std::ptr::null_mut(),
                    n: 0,
                });
            }
            return Err(e);
        }
        Ok(DeviceList {
            rdma,
            list,
            n: n.max(0) as usize,
        })
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn raw(&self, i: usize) -> *mut ibv_device {
        assert!(i < self.n);
        // SAFETY: the list holds n device pointers (then NULL); i < n.
        unsafe { *self.list.add(i) }
    }

    pub fn info(&self, i: usize) -> DeviceInfo {
        let dev = self.raw(i);
        // SAFETY: dev is a live device of the list; name and ibdev_path are NUL-terminated
        // arrays inside it (rdma-core fills them from sysfs).
        let (name, ibdev_path) = unsafe {
            let name = CStr::from_ptr((self.rdma.ibv.get_device_name)(dev));
            let path = CStr::from_ptr((*dev).ibdev_path.as_ptr());
            (name.to_string_lossy().into_owned(), path.to_string_lossy().into_owned())
        };
        let dv_supported = self.rdma.dv.as_ref().is_some_and(|dv| {
            // SAFETY: exported mlx5dv function on a live device.
            unsafe { (dv.is_supported)(dev) }
        });
        DeviceInfo {
            name,
            ibdev_path,
            dv_supported,
        }
    }

    /// Opens device `i`: with DevX where libmlx5 and the kernel offer it (`mlx5dv_open_device`
    /// with `MLX5DV_CONTEXT_FLAGS_DEVX`, as DPDK's `mlx5_os_open_device` does first), else
    /// `ibv_open_device`.
    pub fn open(&self, i: usize, rdma: &Arc<Rdma>) -> Result<Arc<Context>, CallError> {
        let dev = self.raw(i);
        if let Some(open_dv) = rdma.dv.as_ref().and_then(|dv| dv.open_device) {
            let mut attr = mlx5dv_context_attr {
                flags: MLX5DV_CONTEXT_FLAGS_DEVX,
                comp_mask: 0,
            };
            // SAFETY: dev is a live device of the list; attr is a valid mlx5dv_context_attr.
            let ptr = unsafe { open_dv(dev, &mut attr) };
            // NULL (EOPNOTSUPP without DevX in the kernel, EPERM without the capability it
            // needs): open it the plain way.
            if !ptr.is_null() {
                return Ok(Arc::new(Context {
                    rdma: rdma.clone(),
                    ptr,
                    dev,
                    devx: true,
                }));
            }
        }
        // SAFETY: dev is a live device of the list.
        let ptr = unsafe { (rdma.ibv.open_device)(dev) };
        if ptr.is_null() {
            return Err(last_errno("ibv_open_device"));
        }
        Ok(Arc::new(Context {
            rdma: rdma.clone(),
            ptr,
            dev,
            devx: false,
        }))
    }
}

impl Drop for DeviceList<'_> {
    fn drop(&mut self) {
        if !self.list.is_null() {
            // SAFETY: the list came from ibv_get_device_list and is freed once; open contexts
            // keep their device referenced inside libibverbs.
            unsafe { (self.rdma.ibv.free_device_list)(self.list) }
        }
    }
}

/// An open device (`ibv_open_device`), closed on drop.
pub struct Context {
    rdma: Arc<Rdma>,
    ptr: *mut ibv_context,
    dev: *mut ibv_device,
    /// Opened with DevX: [`Context::devx_cmd`] may be used.
    devx: bool,
}

// SAFETY: libibverbs' control verbs are thread-safe per context (the kernel serialises them; the
// provider's own state has its locks), and nothing here touches data-path state.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Runs a DevX command (`mlx5dv_devx_general_cmd`): `cmd` in, the answer into `out`.
    /// Err(EOPNOTSUPP) on a context opened without DevX; Err(EIO) when the device answers
    /// with a bad status.
    pub fn devx_cmd(&self, cmd: &[u8], out: &mut [u8]) -> Result<(), CallError> {
        let f = self
            .rdma
            .dv
            .as_ref()
            .and_then(|dv| dv.devx_general_cmd)
            .filter(|_| self.devx);
        let Some(f) = f else {
            return Err(CallError {
                call: "mlx5dv_devx_general_cmd",
                errno: libc::EOPNOTSUPP,
            });
        };
        // SAFETY: live DevX context; both buffers are valid for their lengths.
        let ret = unsafe {
            f(
                self.ptr,
                cmd.as_ptr().cast(),
                cmd.len(),
                out.as_mut_ptr().cast(),
                out.len(),
            )
        };
        check("mlx5dv_devx_general_cmd", ret)?;
        if out.first() != Some(&0) {
            return Err(CallError {
                call: "mlx5dv_devx_general_cmd",
                errno: libc::EIO,
            });
        }
        Ok(())
    }

    /// The context's `async_fd`, readable when an asynchronous event waits.
    pub fn async_fd(&self) -> c_int {
        // SAFETY: live context; async_fd is a plain field libibverbs set at open.
        unsafe { (*self.ptr).async_fd }
    }

    /// Some(()) where libibverbs exports `ibv_get_async_event` and `ibv_ack_async_event`.
    pub fn get_async_event_fn(&self) -> Option<()> {
        self.rdma
            .ibv
            .get_async_event
            .and(self.rdma.ibv.ack_async_event)
            .map(|_| ())
    }

    /// The next asynchronous event (its type, the port number for port events, and the address
    /// of the object it is about for CQ, QP and WQ events: `Cq::addr` and the others), acked;
    /// None when none waits (the fd is non-blocking) or the call fails.
    pub fn next_async_event(&self) -> Option<(ibv_event_type, c_int, usize)> {
        let (get, ack) = (self.rdma.ibv.get_async_event?, self.rdma.ibv.ack_async_event?);
        // SAFETY: ibv_async_event is C data (a union of pointers and an int, an enum): all zero
        // is valid.
        let mut ev: ibv_async_event = unsafe { std::mem::zeroed() };
        // SAFETY: live context, valid event struct.
        if unsafe { get(self.ptr, &mut ev) } != 0 {
            return None;
        }
        // SAFETY: port_num is the union member a port or device event fills; for other events
        // it reads the low bits of a pointer, which only the port events below look at.
        let port = unsafe { ev.element.port_num };
        // SAFETY: the union's pointer members share its storage; read as an address only.
        let element = unsafe { ev.element.cq } as usize;
        let ty = ev.event_type;
        // SAFETY: the event just returned, acked once.
        unsafe { ack(&mut ev) };
        Some((ty, port, element))
    }

    /// `___ibv_query_port`.
    pub fn query_port(&self, port: u8) -> Result<ibv_port_attr, CallError> {
        let mut attr = ibv_port_attr::default();
        // SAFETY: live context.
        let ret = unsafe { ops::ibv_query_port(&self.rdma.ibv, self.ptr, port, &mut attr) };
        check("ibv_query_port", ret).map(|()| attr)
    }

    /// `ibv_query_device_ex` (legacy fallback included).
    pub fn query_device_ex(&self) -> Result<ibv_device_attr_ex, CallError> {
        let mut attr = ibv_device_attr_ex::default();
        // SAFETY: live context.
        let ret = unsafe { ops::ibv_query_device_ex(&self.rdma.ibv, self.ptr, &mut attr) };
        check("ibv_query_device_ex", ret).map(|()| attr)
    }

    /// The device clock's raw ticks now (`ibv_query_rt_values_ex` with
    /// `IBV_VALUES_MASK_RAW_CLOCK`), or None where the provider does not read it.
    pub fn raw_clock(&self) -> Option<u64> {
        let mut v = ibv_values_ex {
            comp_mask: IBV_VALUES_MASK_RAW_CLOCK,
            ..Default::default()
        };
        // SAFETY: live context.
        let ret = unsafe { ops::ibv_query_rt_values_ex(self.ptr, &mut v) };
        if ret != 0 || v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK == 0 {
            return None;
        }
        // rdma-core's verbs.h: providers give the raw clock as a timespec; mlx5 all in tv_nsec.
        Some(
            (v.raw_clock.tv_sec as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(v.raw_clock.tv_nsec as u64),
        )
    }

    /// The striding RQ caps `mlx5dv_query_device` reports (`MLX5DV_CONTEXT_MASK_STRIDING_RQ`);
    /// all zero (none) where the library does not answer for them.
    pub fn striding_caps(&self) -> mlx5dv_striding_rq_caps {
        let none = mlx5dv_striding_rq_caps::default();
        let Some(dv) = &self.rdma.dv else { return none };
        let mut attr = mlx5dv_context {
            comp_mask: u64::from(MLX5DV_CONTEXT_MASK_STRIDING_RQ),
            ..Default::default()
        };
        // SAFETY: live context, valid out struct.
        let ret = unsafe { (dv.query_device)(self.ptr, &mut attr) };
        if ret != 0 || attr.comp_mask & u64::from(MLX5DV_CONTEXT_MASK_STRIDING_RQ) == 0 {
            return none;
        }
        attr.striding_rq_caps
    }

    /// `mlx5dv_is_supported` + `mlx5dv_query_device`, or why DV is out.
    /// `mlx5dv_query_device` asking for `cqe_comp_caps`: (max_num, supported_format), or None
    /// where the device reports no compression.
    pub fn mlx5dv_cqe_comp_caps(&self) -> Option<(u32, u32)> {
        let dv = self.rdma.dv.as_ref()?;
        let mut attr = mlx5dv_context {
            comp_mask: u64::from(MLX5DV_CONTEXT_MASK_CQE_COMPRESION),
            ..Default::default()
        };
        // SAFETY: live context, valid out struct.
        let ret = unsafe { (dv.query_device)(self.ptr, &mut attr) };
        (ret == 0 && attr.comp_mask & u64::from(MLX5DV_CONTEXT_MASK_CQE_COMPRESION) != 0)
            .then_some((attr.cqe_comp_caps.max_num, attr.cqe_comp_caps.supported_format))
    }

    pub fn mlx5dv_query(&self) -> Result<mlx5dv_context, String> {
        let Some(dv) = &self.rdma.dv else {
            return Err(self
                .rdma
                .dv_missing
                .clone()
                .unwrap_or_else(|| "libmlx5 not loaded".into()));
        };
        // SAFETY: the device this context was opened on is live while the context is.
        if !unsafe { (dv.is_supported)(self.dev) } {
            return Err("mlx5dv_is_supported says the device is not an mlx5 one".into());
        }
        let mut attr = mlx5dv_context {
            comp_mask: 0,
            ..Default::default()
        };
        // SAFETY: live context, valid out struct.
        let ret = unsafe { (dv.query_device)(self.ptr, &mut attr) };
        check("mlx5dv_query_device", ret).map_err(|e| e.to_string())?;
        Ok(attr)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every object created on the context holds an Arc of it, so none is left.
        unsafe { (self.rdma.ibv.close_device)(self.ptr) };
    }
}

/// A protection domain.
pub struct Pd {
    ctx: Arc<Context>,
    ptr: *mut ibv_pd,
}

// SAFETY: control verbs on a PD are thread-safe (see Context).
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    pub fn alloc(ctx: &Arc<Context>) -> Result<Arc<Pd>, CallError> {
        // SAFETY: live context.
        let ptr = unsafe { (ctx.rdma.ibv.alloc_pd)(ctx.ptr) };
        if ptr.is_null() {
            return Err(last_errno("ibv_alloc_pd"));
        }
        Ok(Arc::new(Pd { ctx: ctx.clone(), ptr }))
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: everything created on the PD holds an Arc of it, so none is left.
        unsafe { (self.ctx.rdma.ibv.dealloc_pd)(self.ptr) };
    }
}

/// Memory a [`Mr`] may register.
///
/// # Safety
/// `base()..base() + len()` must be mapped, readable and writable memory that stays mapped for
/// as long as the value lives (the Mr holds an `Arc` of it until the registration is gone).
pub unsafe trait Registrable: Send + Sync + 'static {
    fn base(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A memory region over a whole buffer pool (one per pool, as VPP registers its buffer arena).
pub struct Mr {
    pd: Arc<Pd>,
    ptr: *mut ibv_mr,
    lkey: u32,
    /// Kept mapped until the registration is gone.
    memory: Arc<dyn Registrable>,
}

// SAFETY: an MR is only read (lkey) after creation; dereg is a thread-safe control verb.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// `ibv_reg_mr(pd, base, len, IBV_ACCESS_LOCAL_WRITE)`: the NIC writes received frames.
    pub fn register<M: Registrable>(pd: &Arc<Pd>, memory: &Arc<M>) -> Result<Arc<Mr>, CallError> {
        // SAFETY: `Registrable` promises base..base+len mapped while the Arc (kept below) lives.
        let ptr = unsafe {
            (pd.ctx.rdma.ibv.reg_mr)(
                pd.ptr,
                memory.base().cast(),
                memory.len(),
                IBV_ACCESS_LOCAL_WRITE as c_int,
            )
        };
        if ptr.is_null() {
            return Err(last_errno("ibv_reg_mr"));
        }
        // SAFETY: a live MR returned just now.
        let lkey = unsafe { (*ptr).lkey };
        Ok(Arc::new(Mr {
            pd: pd.clone(),
            ptr,
            lkey,
            memory: memory.clone(),
        }))
    }

    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The start of the registered memory (to find a pool's MR again).
    pub fn base(&self) -> *mut u8 {
        self.memory.base()
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: the queues using this lkey hold an Arc of the Mr, so none is left.
        unsafe { (self.pd.ctx.rdma.ibv.dereg_mr)(self.ptr) };
    }
}

/// A completion queue.
pub struct Cq {
    ctx: Arc<Context>,
    ptr: *mut ibv_cq,
}

// SAFETY: creation and destruction are thread-safe control verbs; polling is done by the one
// queue that owns the CQ, on its thread.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// The object's address, as an asynchronous event names it (`ibv_async_event.element`).
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// `ibv_create_cq(ctx, cqe, NULL, NULL, 0)`.
    pub fn create(ctx: &Arc<Context>, cqe: u32) -> Result<Arc<Cq>, CallError> {
        let cqe = c_int::try_from(cqe).unwrap_or(c_int::MAX);
        // SAFETY: live context; no channel, no completion vector.
        let ptr = unsafe { (ctx.rdma.ibv.create_cq)(ctx.ptr, cqe, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if ptr.is_null() {
            return Err(last_errno("ibv_create_cq"));
        }
        Ok(Arc::new(Cq { ctx: ctx.clone(), ptr }))
    }

    /// `mlx5dv_create_cq` with `cqe_size = 64` forced (MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE):
    /// otherwise the `MLX5_CQE_SIZE` environment variable (DPDK sets 128) changes the layout
    /// under the datapath (VPP commit 844a0e8b070; rdma-core providers/mlx5/verbs.c
    /// `get_cqe_size`). No CQE compression: the DV receive path does not decode it.
    pub fn create_dv(ctx: &Arc<Context>, cqe: u32) -> Result<Arc<Cq>, CallError> {
        Cq::create_dv_comp(ctx, cqe, 0)
    }

    /// [`Cq::create_dv`] with CQE compression in the mini-CQE format `comp_format` (an
    /// `MLX5DV_CQE_RES_FORMAT_*` flag; 0 for none): `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`.
    pub fn create_dv_comp(ctx: &Arc<Context>, cqe: u32, comp_format: u8) -> Result<Arc<Cq>, CallError> {
        let Some(dv) = &ctx.rdma.dv else {
            return Err(CallError {
                call: "mlx5dv_create_cq",
                errno: libc::EOPNOTSUPP,
            });
        };
        let mut attr = ibv_cq_init_attr_ex {
            cqe,
            ..Default::default()
        };
        let mut dv_attr = mlx5dv_cq_init_attr {
            comp_mask: u64::from(MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE),
            cqe_size: 64,
            ..Default::default()
        };
        if comp_format != 0 {
            dv_attr.comp_mask |= u64::from(MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE);
            dv_attr.cqe_comp_res_format = comp_format;
        }
        // SAFETY: live context, valid attribute structs.
        let ex = unsafe { (dv.create_cq)(ctx.ptr, &mut attr, &mut dv_attr) };
        if ex.is_null() {
            return Err(last_errno("mlx5dv_create_cq"));
        }
        // verbs.h `ibv_cq_ex_to_cq`: a plain cast, ibv_cq_ex starts with ibv_cq's fields.
        Ok(Arc::new(Cq {
            ctx: ctx.clone(),
            ptr: ex.cast(),
        }))
    }

    /// `mlx5dv_init_obj(MLX5DV_OBJ_CQ)`. From then on the caller owns the consumer index.
    pub fn dv_info(&self) -> Result<mlx5dv_cq, CallError> {
        let dv = self.ctx.rdma.dv.as_ref().ok_or(CallError {
            call: "mlx5dv_init_obj",
            errno: libc::EOPNOTSUPP,
        })?;
        let mut out = mlx5dv_cq::default();
        let mut obj = mlx5dv_obj::default();
        obj.cq.in_ = self.ptr;
        obj.cq.out = &mut out;
        // SAFETY: live CQ; obj points at out for the duration of the call.
        let ret = unsafe { (dv.init_obj)(&mut obj, u64::from(MLX5DV_OBJ_CQ)) };
        check("mlx5dv_init_obj(CQ)", ret).map(|()| out)
    }

    /// verbs.h `ibv_poll_cq`: completions written to the front of `wc`, or < 0 on error. Not for
    /// a CQ handed to the DV datapath (`dv_info`), whose consumer index the datapath owns.
    #[inline(always)]
    pub fn poll(&self, wc: &mut [ibv_wc]) -> c_int {
        let n = c_int::try_from(wc.len()).unwrap_or(c_int::MAX);
        // SAFETY: live CQ; wc holds n writable entries; the provider serialises pollers with
        // the CQ's own lock (rdma-core providers/mlx5/cq.c `mlx5_poll_cq`).
        unsafe { ops::ibv_poll_cq(self.ptr, n, wc.as_mut_ptr()) }
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: the QPs and WQs on this CQ hold an Arc of it, so none is left.
        unsafe { (self.ctx.rdma.ibv.destroy_cq)(self.ptr) };
    }
}

/// A queue pair: a raw-packet send queue or an RSS (hash) QP.
pub struct Qp {
    pd: Arc<Pd>,
    ptr: *mut ibv_qp,
    _cq: Option<Arc<Cq>>,
    _ind: Option<Arc<IndTable>>,
}

// SAFETY: control verbs (modify, destroy, flows) are thread-safe; posting is done by the one
// queue that owns the QP, on its thread.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    /// The object's address, as an asynchronous event names it (`ibv_async_event.element`).
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// A RAW_PACKET QP with a send queue only (VPP `rdma_txq_init`, DPDK
    /// `mlx5_txq_ibv_qp_create`): send and receive CQ both `cq`, one SGE, and `max_inline` the
    /// largest frame the queue copies into a WQE, so that rdma-core sizes the WQEs for it and
    /// refuses (EINVAL) what the device's `max_wqe_sz_sq` cannot take (`mlx5_calc_send_wqe`).
    pub fn create_raw_tx(pd: &Arc<Pd>, cq: &Arc<Cq>, depth: u32, max_inline: u32) -> Result<Arc<Qp>, CallError> {
        let mut attr = ibv_qp_init_attr {
            send_cq: cq.ptr,
            recv_cq: cq.ptr,
            cap: ibv_qp_cap {
                max_send_wr: depth,
                max_send_sge: 1,
                max_inline_data: max_inline,
                ..Default::default()
            },
            qp_type: IBV_QPT_RAW_PACKET,
            sq_sig_all: 0,
            ..Default::default()
        };
        // SAFETY: live PD and CQ, valid attributes.
        let ptr = unsafe { (pd.ctx.rdma.ibv.create_qp)(pd.ptr, &mut attr) };
        if ptr.is_null() {
            return Err(last_errno("ibv_create_qp"));
        }
        let qp = Arc::new(Qp {
            pd: pd.clone(),
            ptr,
            _cq: Some(cq.clone()),
            _ind: None,
        });
        // rdma-core writes back what the QP takes; a provider that gives less than asked would
        // see WQEs larger than it sized the ring for.
        if attr.cap.max_inline_data < max_inline {
            return Err(CallError {
                call: "ibv_create_qp",
                errno: libc::EINVAL,
            });
        }
        Ok(qp)
    }

    /// WQEBBs rdma-core gives a RAW_PACKET send queue of `depth` WQEs with one SGE and
    /// `max_inline` inline bytes (`mlx5_calc_send_wqe`: control and Ethernet segments, then the
    /// larger of one gather entry and the inline segment, in 64-byte units; the ring a power of
    /// two), so that its CQ can be sized before the QP exists.
    pub fn raw_tx_wqebbs(depth: u32, max_inline: u32) -> u32 {
        const OVERHEAD: u32 = 16 + 32;
        let inline = if max_inline > 0 {
            OVERHEAD + (4 + max_inline).div_ceil(16) * 16
        } else {
            0
        };
        let wqe = (OVERHEAD + 16).max(inline).div_ceil(64) * 64;
        (depth.saturating_mul(wqe)).next_power_of_two() / 64
    }

    /// An RSS QP over `ind` (VPP `rdma_rxq_finalize`): ibv_create_qp_ex with PD | IND_TABLE |
    /// RX_HASH, Toeplitz over a 40-byte key, no send or receive queue of its own.
    pub fn create_rss(pd: &Arc<Pd>, ind: &Arc<IndTable>, key: &[u8; 40], fields: u64) -> Result<Arc<Qp>, CallError> {
        let mut key = *key;
        let mut attr = ibv_qp_init_attr_ex {
            qp_type: IBV_QPT_RAW_PACKET,
            comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
            pd: pd.ptr,
            rwq_ind_tbl: ind.ptr,
            rx_hash_conf: ibv_rx_hash_conf {
                rx_hash_function: IBV_RX_HASH_FUNC_TOEPLITZ as u8,
                rx_hash_key_len: key.len() as u8,
                rx_hash_key: key.as_mut_ptr(),
                rx_hash_fields_mask: fields,
            },
            ..Default::default()
        };
        // SAFETY: live context/PD/table; key outlives the call (the kernel copies it).
        let ptr = unsafe { ops::ibv_create_qp_ex(&pd.ctx.rdma.ibv, pd.ctx.ptr, &mut attr) };
        if ptr.is_null() {
            return Err(last_errno("ibv_create_qp_ex"));
        }
        Ok(Arc::new(Qp {
            pd: pd.clone(),
            ptr,
            _cq: None,
            _ind: Some(ind.clone()),
        }))
    }

    pub fn qp_num(&self) -> u32 {
        // SAFETY: live QP; qp_num never changes.
        unsafe { (*self.ptr).qp_num }
    }

    fn modify(&self, state: ibv_qp_state, port: Option<u8>) -> Result<(), CallError> {
        let mut attr = ibv_qp_attr {
            qp_state: state,
            ..Default::default()
        };
        let mut mask = IBV_QP_STATE;
        if let Some(p) = port {
            attr.port_num = p;
            mask |= IBV_QP_PORT;
        }
        // SAFETY: live QP, valid attributes.
        let ret = unsafe { (self.pd.ctx.rdma.ibv.modify_qp)(self.ptr, &mut attr, mask as c_int) };
        check("ibv_modify_qp", ret)
    }

    /// RESET → INIT (with the port) → RTR → RTS, the RAW_PACKET send-queue bring-up (VPP
    /// `rdma_txq_init`, rdma-pktgen common.c, perftest: INIT takes STATE|PORT only).
    pub fn to_rts(&self, port: u8) -> Result<(), CallError> {
        self.modify(IBV_QPS_INIT, Some(port))?;
        self.modify(IBV_QPS_RTR, None)?;
        self.modify(IBV_QPS_RTS, None)
    }

    /// Any state → RESET: the device stops reading the send queue; rdma-core's mlx5_modify_qp
    /// also zeroes the doorbell records and the provider's indices (providers/mlx5/verbs.c).
    pub fn reset(&self) -> Result<(), CallError> {
        self.modify(IBV_QPS_RESET, None)
    }

    /// `mlx5dv_init_obj(MLX5DV_OBJ_QP)`.
    pub fn dv_info(&self) -> Result<mlx5dv_qp, CallError> {
        let dv = self.pd.ctx.rdma.dv.as_ref().ok_or(CallError {
            call: "mlx5dv_init_obj",
            errno: libc::EOPNOTSUPP,
        })?;
        // comp_mask is in/out: zero asks for nothing optional (mlx5.c `mlx5dv_get_qp`).
        let mut out = mlx5dv_qp::default();
        let mut obj = mlx5dv_obj::default();
        obj.qp.in_ = self.ptr;
        obj.qp.out = &mut out;
        // SAFETY: live QP; obj points at out for the duration of the call.
        let ret = unsafe { (dv.init_obj)(&mut obj, u64::from(MLX5DV_OBJ_QP)) };
        check("mlx5dv_init_obj(QP)", ret).map(|()| out)
    }

    /// verbs.h `ibv_post_send`. Returns 0 or an errno; `bad` names the first WR not posted.
    ///
    /// # Safety
    /// Only the QP's owning queue posts (one thread); the WRs' SGEs lie in registered memory
    /// that stays untouched until their completion.
    #[inline(always)]
    pub unsafe fn post_send(&self, wr: *mut ibv_send_wr, bad: &mut *mut ibv_send_wr) -> c_int {
        // SAFETY: live QP; the caller vouches for the chain.
        unsafe { ops::ibv_post_send(self.ptr, wr, bad) }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: flows on this QP hold an Arc of it, so none is left.
        unsafe { (self.pd.ctx.rdma.ibv.destroy_qp)(self.ptr) };
    }
}

/// A receive work queue (`IBV_WQT_RQ`).
pub struct Wq {
    pd: Arc<Pd>,
    ptr: *mut ibv_wq,
    _cq: Arc<Cq>,
}

// SAFETY: control verbs are thread-safe; posting is done by the one queue that owns the WQ.
unsafe impl Send for Wq {}
// SAFETY: as above.
unsafe impl Sync for Wq {}

impl Wq {
    /// The object's address, as an asynchronous event names it (`ibv_async_event.element`).
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// verbs.h `ibv_create_wq`, completions to `cq`, with `max_sge` data segments per WQE (the
    /// WQ's stride: rdma-core `mlx5_calc_rwq_size`, 16 bytes per segment rounded up to a power
    /// of two; 1 gives 16-byte WQEs) and, with
    /// `cvlan_strip`, `IBV_WQ_FLAGS_CVLAN_STRIPPING` (the kernel clears the RQ context's `vsd`).
    pub fn create_with(
        pd: &Arc<Pd>,
        cq: &Arc<Cq>,
        depth: u32,
        max_sge: u32,
        cvlan_strip: bool,
    ) -> Result<Arc<Wq>, CallError> {
        let mut attr = ibv_wq_init_attr {
            wq_type: IBV_WQT_RQ,
            max_wr: depth,
            max_sge,
            pd: pd.ptr,
            cq: cq.ptr,
            ..Default::default()
        };
        if cvlan_strip {
            attr.comp_mask |= IBV_WQ_INIT_ATTR_FLAGS;
            attr.create_flags |= IBV_WQ_FLAGS_CVLAN_STRIPPING;
        }
        // SAFETY: live context/PD/CQ, valid attributes.
        let ptr = unsafe { ops::ibv_create_wq(pd.ctx.ptr, &mut attr) };
        if ptr.is_null() {
            return Err(last_errno("ibv_create_wq"));
        }
        Ok(Arc::new(Wq {
            pd: pd.clone(),
            ptr,
            _cq: cq.clone(),
        }))
    }

    /// rdma-core `mlx5dv_create_wq` with `MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ`: a striding WQ
    /// of `depth` WQEs of `sges` data segments each (after the next segment), strides as
    /// `striding` says; then what the inline `ibv_create_wq` would have initialised
    /// (`ops::init_wq`).
    pub fn create_striding(
        pd: &Arc<Pd>,
        cq: &Arc<Cq>,
        depth: u32,
        sges: u32,
        striding: mlx5dv_striding_rq_init_attr,
    ) -> Result<Arc<Wq>, CallError> {
        let create = pd.ctx.rdma.dv.as_ref().and_then(|dv| dv.create_wq).ok_or(CallError {
            call: "mlx5dv_create_wq",
            errno: libc::EOPNOTSUPP,
        })?;
        let mut attr = ibv_wq_init_attr {
            wq_type: IBV_WQT_RQ,
            max_wr: depth,
            max_sge: sges,
            pd: pd.ptr,
            cq: cq.ptr,
            ..Default::default()
        };
        let mut dv = mlx5dv_wq_init_attr {
            comp_mask: u64::from(MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ),
            striding_rq_attrs: striding,
        };
        // SAFETY: live context/PD/CQ, valid attributes; the new WQ is initialised before anyone
        // else sees it.
        let ptr = unsafe {
            let w = create(pd.ctx.ptr, &mut attr, &mut dv);
            if !w.is_null() {
                ops::init_wq(w, &attr);
            }
            w
        };
        if ptr.is_null() {
            return Err(last_errno("mlx5dv_create_wq"));
        }
        Ok(Arc::new(Wq {
            pd: pd.clone(),
            ptr,
            _cq: cq.clone(),
        }))
    }

    pub fn wq_num(&self) -> u32 {
        // SAFETY: live WQ; wq_num never changes.
        unsafe { (*self.ptr).wq_num }
    }

    /// verbs.h `ibv_modify_wq` with IBV_WQ_ATTR_STATE. Going to RESET, rdma-core's
    /// `mlx5_modify_wq` also cleans the CQ of the WQ's entries (unless the CQ is DV-owned) and
    /// zeroes the doorbell record.
    pub fn set_state(&self, state: ibv_wq_state) -> Result<(), CallError> {
        let mut attr = ibv_wq_attr {
            attr_mask: IBV_WQ_ATTR_STATE,
            wq_state: state,
            ..Default::default()
        };
        // SAFETY: live WQ, valid attributes.
        let ret = unsafe { ops::ibv_modify_wq(self.ptr, &mut attr) };
        check("ibv_modify_wq", ret)
    }

    /// `mlx5dv_init_obj(MLX5DV_OBJ_RWQ)`.
    pub fn dv_info(&self) -> Result<mlx5dv_rwq, CallError> {
        let dv = self.pd.ctx.rdma.dv.as_ref().ok_or(CallError {
            call: "mlx5dv_init_obj",
            errno: libc::EOPNOTSUPP,
        })?;
        let mut out = mlx5dv_rwq::default();
        let mut obj = mlx5dv_obj::default();
        obj.rwq.in_ = self.ptr;
        obj.rwq.out = &mut out;
        // SAFETY: live WQ; obj points at out for the duration of the call.
        let ret = unsafe { (dv.init_obj)(&mut obj, u64::from(MLX5DV_OBJ_RWQ)) };
        check("mlx5dv_init_obj(RWQ)", ret).map(|()| out)
    }

    /// verbs.h `ibv_post_wq_recv`. Returns 0 or an errno.
    ///
    /// # Safety
    /// Only the WQ's owning queue posts; the SGEs lie in registered memory the device may write
    /// until their completion.
    #[inline(always)]
    pub unsafe fn post_recv(&self, wr: *mut ibv_recv_wr, bad: &mut *mut ibv_recv_wr) -> c_int {
        // SAFETY: live WQ; the caller vouches for the chain.
        unsafe { ops::ibv_post_wq_recv(self.ptr, wr, bad) }
    }
}

impl Drop for Wq {
    fn drop(&mut self) {
        // SAFETY: the indirection table over this WQ holds an Arc of it, so none is left.
        unsafe { ops::ibv_destroy_wq(self.ptr) };
    }
}

/// A receive WQ indirection table: the RSS spread.
pub struct IndTable {
    ctx: Arc<Context>,
    ptr: *mut ibv_rwq_ind_table,
    _wqs: Vec<Arc<Wq>>,
}

// SAFETY: only created and destroyed (thread-safe control verbs).
unsafe impl Send for IndTable {}
// SAFETY: as above.
unsafe impl Sync for IndTable {}

impl IndTable {
    /// verbs.h `ibv_create_rwq_ind_table` over `wqs`, whose length must be a power of two.
    pub fn create(ctx: &Arc<Context>, wqs: &[Arc<Wq>]) -> Result<Arc<IndTable>, CallError> {
        debug_assert!(wqs.len().is_power_of_two());
        let mut tbl: Vec<*mut ibv_wq> = wqs.iter().map(|w| w.ptr).collect();
        let mut attr = ibv_rwq_ind_table_init_attr {
            log_ind_tbl_size: wqs.len().trailing_zeros(),
            ind_tbl: tbl.as_mut_ptr(),
            comp_mask: 0,
        };
        // SAFETY: live context and WQs; tbl outlives the call.
        let ptr = unsafe { ops::ibv_create_rwq_ind_table(ctx.ptr, &mut attr) };
        if ptr.is_null() {
            return Err(last_errno("ibv_create_rwq_ind_table"));
        }
        Ok(Arc::new(IndTable {
            ctx: ctx.clone(),
            ptr,
            _wqs: wqs.to_vec(),
        }))
    }
}

impl Drop for IndTable {
    fn drop(&mut self) {
        // SAFETY: RSS QPs over this table hold an Arc of it, so none is left.
        unsafe { ops::ibv_destroy_rwq_ind_table(self.ptr) };
        let _ = &self.ctx;
    }
}

/// A compiled flow rule as `ibv_create_flow` takes it.
///
/// # Safety
/// `as_attr_ptr` must return an 8-aligned `ibv_flow_attr`, writable, followed by the
/// `num_of_specs` specs its `size` counts, all valid while the borrow lasts.
pub unsafe trait FlowAttr {
    fn as_attr_ptr(&mut self) -> *mut ibv_flow_attr;
}

/// An installed steering rule.
pub struct Flow {
    ptr: *mut ibv_flow,
    _qp: Arc<Qp>,
}

// SAFETY: only created and destroyed (thread-safe control verbs).
unsafe impl Send for Flow {}
// SAFETY: as above.
unsafe impl Sync for Flow {}

impl Flow {
    /// verbs.h `ibv_create_flow` with a compiled attribute blob, on port `port` of the QP's
    /// device (the port the QP was brought up on).
    pub fn create<A: FlowAttr + ?Sized>(qp: &Arc<Qp>, attr: &mut A, port: u8) -> Result<Flow, CallError> {
        let attr = attr.as_attr_ptr();
        // SAFETY: `FlowAttr` promises an 8-aligned, writable ibv_flow_attr at the pointer.
        unsafe { (*attr).port = port };
        // SAFETY: live QP; the blob is an 8-aligned ibv_flow_attr followed by its specs.
        let ptr = unsafe { ops::ibv_create_flow(qp.ptr, attr) };
        if ptr.is_null() {
            return Err(last_errno("ibv_create_flow"));
        }
        Ok(Flow { ptr, _qp: qp.clone() })
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        // SAFETY: a live flow, destroyed once.
        unsafe { ops::ibv_destroy_flow(self.ptr) };
    }
}
