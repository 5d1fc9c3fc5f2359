//! Completion channels and completion events: `ibv_create_comp_channel`, a CQ created on one,
//! `ibv_req_notify_cq` arming it, `ibv_get_cq_event` / `ibv_ack_cq_events`.
//!
//! On hardware an armed CQ raises one event when a CQE is written beyond the consumer index
//! it was armed with (or is already there), and the kernel queues it on the channel's file,
//! which `ibv_get_cq_event` reads (libibverbs/device.c). The model's device writes CQEs on its
//! own thread without knowing about arming, so a watcher thread of the library stands in for
//! the event queue: it looks at every armed CQ every [`TICK`] and, when the CQE at its consumer
//! index belongs to software, disarms it, queues it on its channel and makes the channel's fd
//! (an eventfd) readable. One event per arming, as on hardware; events arrive up to a tick
//! late. Async events are not these (see `ibv_get_async_event`).

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use rdma_abi::*;

use crate::global::{global, Kind};
use crate::objects::{lock, Cq};
use crate::{guard, int_errno, ptr_or_errno, set_errno};

/// How often the watcher looks at armed CQs.
const TICK: Duration = Duration::from_micros(200);

/// A completion channel: the `struct ibv_comp_channel` C code holds, and the CQs whose events
/// wait on it (what the kernel's event file would hold).
#[repr(C)]
pub(crate) struct Channel {
    pub ch: ibv_comp_channel,
    pub queue: Mutex<VecDeque<usize>>,
}

/// Armed CQs, by address; a CQ leaves before it is freed (`disarm`).
static ARMED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(context: *mut ibv_context) -> *mut ibv_comp_channel {
    guard(std::ptr::null_mut(), || {
        ptr_or_errno((|| {
            let g = global()?;
            if context.is_null() || !g.reg().check(context as usize, Kind::Context) {
                return Err(libc::EINVAL);
            }
            // SAFETY: plain eventfd(2); the fd belongs to the channel and is closed with it.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
            }
            let c = Box::into_raw(Box::new(Channel {
                ch: ibv_comp_channel { context, fd, refcnt: 0 },
                queue: Mutex::new(VecDeque::new()),
            }));
            g.reg().add(c as usize, Kind::Channel, vec![context as usize]);
            Ok(c.cast::<ibv_comp_channel>())
        })())
    })
}

/// EBUSY while CQs use the channel (libibverbs checks `refcnt`).
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard(libc::EINVAL, || {
        int_errno((|| {
            let g = global()?;
            g.reg().remove(channel as usize, Kind::Channel)?;
            // SAFETY: allocated by ibv_create_comp_channel, out of the registry now.
            let c = unsafe { Box::from_raw(channel.cast::<Channel>()) };
            // SAFETY: the channel's own fd.
            unsafe { libc::close(c.ch.fd) };
            Ok(())
        })())
    })
}

/// A live channel of `context` named by a CQ's creator, or EINVAL.
pub(crate) fn channel_for(context: *mut ibv_context, channel: *mut c_void) -> Result<*mut Channel, i32> {
    if channel.is_null() {
        return Ok(std::ptr::null_mut());
    }
    let g = global()?;
    if !g.reg().check(channel as usize, Kind::Channel) {
        return Err(libc::EINVAL);
    }
    let c = channel.cast::<Channel>();
    // SAFETY: a live channel.
    if unsafe { (*c).ch.context } != context {
        return Err(libc::EINVAL);
    }
    Ok(c)
}

/// `ibv_req_notify_cq`: arms the CQ for one event (solicited-only is all events here: the
/// model's raw packet CQEs carry no solicited flag). A CQ without a channel arms to no effect.
pub(crate) fn arm(cq: &Cq) {
    if cq.cq.channel.is_null() {
        return;
    }
    let mut a = lock(&ARMED);
    let p = cq as *const Cq as usize;
    if !a.contains(&p) {
        a.push(p);
    }
    drop(a);
    static WATCHER: OnceLock<()> = OnceLock::new();
    WATCHER.get_or_init(|| {
        let _ = std::thread::Builder::new().name("model-cq-events".into()).spawn(watch);
    });
}

/// Takes a CQ out of the armed set (before it is destroyed).
pub(crate) fn disarm(cq: *const Cq) {
    lock(&ARMED).retain(|&p| p != cq as usize);
}

/// The watcher: lives for the process, as the model's NIC thread does.
fn watch() {
    loop {
        std::thread::sleep(TICK);
        let mut a = lock(&ARMED);
        a.retain(|&p| {
            // SAFETY: CQs leave ARMED (under this lock) before they are freed.
            let cq = unsafe { &*(p as *const Cq) };
            let ready = {
                let mut poll = lock(&cq.poll);
                let ci = poll.ci;
                poll.ring.poll(ci).is_some()
            };
            if !ready {
                return true;
            }
            let ch = cq.cq.channel.cast::<Channel>();
            // SAFETY: a CQ's channel outlives it (destroying it is EBUSY meanwhile).
            unsafe {
                lock(&(*ch).queue).push_back(p);
                let one: u64 = 1;
                libc::write((*ch).ch.fd, (&one as *const u64).cast(), 8);
            }
            false
        });
    }
}

/// `ibv_get_cq_event`: waits (unless the channel's fd was made non-blocking: then -1 with
/// EAGAIN, as a read of the kernel's event file) for the next event, and names its CQ.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        let Ok(g) = global() else { return -1 };
        if channel.is_null() || cq.is_null() || cq_context.is_null() || !g.reg().check(channel as usize, Kind::Channel)
        {
            set_errno(libc::EINVAL);
            return -1;
        }
        let c = channel.cast::<Channel>();
        loop {
            // SAFETY: a live channel. A queued CQ may have been destroyed since (the model's
            // ibv_destroy_cq does not wait for acknowledgements), so it is checked live first.
            if let Some(p) = lock(unsafe { &(*c).queue }).pop_front() {
                if !g.reg().check(p, Kind::Cq) {
                    continue;
                }
                // SAFETY: a live CQ, and the caller's out pointers (checked non-NULL).
                unsafe {
                    *cq = p as *mut ibv_cq;
                    *cq_context = (*(p as *const Cq)).cq.cq_context;
                }
                return 0;
            }
            let mut n: u64 = 0;
            // SAFETY: reading 8 bytes from the channel's eventfd into a local.
            let r = unsafe { libc::read((*c).ch.fd, (&mut n as *mut u64).cast(), 8) };
            if r < 0 {
                // errno is read()'s: EAGAIN on a non-blocking fd, EINTR, ...
                return -1;
            }
        }
    })
}

/// `ibv_ack_cq_events`: counts the events acknowledged (`comp_events_completed`).
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    guard((), || {
        let Ok(g) = global() else { return };
        if !cq.is_null() && g.reg().check(cq as usize, Kind::Cq) {
            // SAFETY: a live CQ.
            unsafe { (*cq).comp_events_completed = (*cq).comp_events_completed.wrapping_add(nevents) };
        }
    })
}
