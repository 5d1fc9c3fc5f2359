//! Asynchronous events of an open device (`ibv_get_async_event(3)`): a fatal device error, port
//! state changes, and errors of a queue's objects (a CQ in error, a WQ or QP the firmware
//! killed). VPP reads them when the context's `async_fd` turns readable
//! (`rdma_async_event_read_ready`, the fd made non-blocking in `rdma_async_event_init`, and
//! every event but the port's logged as an error), DPDK in its interrupt handler
//! (`mlx5_dev_interrupt_handler`: device and port events; it relies on error CQEs for the rest);
//! rawpkt has no event loop of its own, so one thread per port waits on the fd (and on a pipe
//! that stops it), records what happened in [`Health`], and sets the attention word of each
//! queue the event is about (`dv::attention`), which the queues read on their own paths. The
//! kernel names the object in `element` (`qp.c` `mlx5_ib_wq_event`, `mlx5_ib_qp_event`, `cq.c`
//! `mlx5_ib_cq_event`); a CQ in error or a killed WQ writes no CQE that would say so, so without
//! this the queue would return nothing forever.
//!
//! The same thread re-reads the netdev's MTU every 250 ms (sysfs `mtu`; an RTNLGRP_LINK socket
//! would hear it at once) and tells the send queues when it changed, as DPDK learns link changes
//! through netlink (`mlx5_dev_interrupt_handler_nl`).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use rdma_abi::*;

use crate::dv::{attention, AttentionWord};
use crate::sys::rdma::Context;

/// What the device has reported so far.
#[derive(Default)]
pub(crate) struct Health {
    fatal: AtomicBool,
    /// `IBV_EVENT_PORT_ERR` / `IBV_EVENT_PORT_ACTIVE` for the port, in all.
    port_events: AtomicU64,
    /// The port's link is down (the last port event was PORT_ERR).
    link_down: AtomicBool,
    /// The port's largest frame now (MTU + 18), 0 until the watcher knows it.
    max_frame: AtomicU32,
    /// The attention words of the port's DV queues, with the objects (their addresses, as an
    /// event's `element` names them) each answers for.
    words: Mutex<Vec<(Vec<usize>, Weak<AtomicU32>)>>,
}

impl Health {
    /// `IBV_EVENT_DEVICE_FATAL` came: the device has stopped (the kernel's mlx5 driver moves it
    /// to the internal-error state and stops its DMA), and every queue on it is dead.
    pub(super) fn fatal(&self) -> bool {
        self.fatal.load(Ordering::Acquire)
    }

    pub(super) fn port_events(&self) -> u64 {
        self.port_events.load(Ordering::Relaxed)
    }

    /// The port's largest frame as the watcher last read it (None before it has).
    pub(super) fn max_frame(&self) -> Option<u32> {
        Some(self.max_frame.load(Ordering::Acquire)).filter(|&m| m > 0)
    }

    /// A new attention word for a queue whose objects are at `elements`, with what already
    /// holds (a fatal device, a down link) set in it.
    pub(super) fn register(&self, elements: &[usize]) -> AttentionWord {
        let mut bits = 0;
        if self.fatal() {
            bits |= attention::DEVICE_FATAL;
        }
        if self.link_down.load(Ordering::Acquire) {
            bits |= attention::LINK_DOWN;
        }
        let word = Arc::new(AtomicU32::new(bits));
        let mut words = self.words.lock().unwrap_or_else(|e| e.into_inner());
        words.retain(|(_, w)| w.strong_count() > 0);
        words.push((elements.to_vec(), Arc::downgrade(&word)));
        word
    }

    /// Sets `bits` in the words of the queues of `element` (all of them for None), or clears
    /// them with `clear`; returns how many words it reached.
    fn signal(&self, element: Option<usize>, bits: u32, clear: bool) -> usize {
        let words = self.words.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        for (elements, w) in words.iter() {
            if element.is_some_and(|e| !elements.contains(&e)) {
                continue;
            }
            if let Some(w) = w.upgrade() {
                if clear {
                    w.fetch_and(!bits, Ordering::AcqRel);
                } else {
                    w.fetch_or(bits, Ordering::AcqRel);
                }
                n += 1;
            }
        }
        n
    }
}

/// Where the watcher reads the netdev's MTU, and what it was at open.
pub(crate) struct MtuSource {
    pub path: std::path::PathBuf,
    pub mtu: u32,
}

/// The thread reading one context's events; stopped and joined on drop.
pub(crate) struct Watcher {
    wake: libc::c_int,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `ctx` for events of port `port_num`; None (nothing watched, said once on
    /// stderr) where libibverbs lacks `ibv_get_async_event` or the fds cannot be set up.
    pub(super) fn start(
        ctx: Arc<Context>,
        port_num: u8,
        spec: String,
        health: Arc<Health>,
        mtu: Option<MtuSource>,
    ) -> Option<Watcher> {
        if let Some(m) = &mtu {
            health.max_frame.store(m.mtu + 18, Ordering::Release);
        }
        let fd = ctx.async_fd();
        ctx.get_async_event_fn()?;
        let mut pipe = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two fds into the array; the context's async fd is made
        // non-blocking as VPP does (an event read must never block the watcher's stop).
        let ok = unsafe {
            libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) == 0 && {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0
            }
        };
        if !ok {
            log::warn!(
                "{spec}: device events are not watched ({})",
                std::io::Error::last_os_error()
            );
            return None;
        }
        let stop = pipe[0];
        let thread = std::thread::Builder::new()
            .name("rawpkt-events".into())
            .spawn(move || watch(&ctx, fd, stop, port_num, &spec, &health, mtu))
            .ok()?;
        Some(Watcher {
            wake: pipe[1],
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // SAFETY: the write end of our pipe; closing it wakes the watcher's poll (POLLHUP).
        unsafe { libc::close(self.wake) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn watch(
    ctx: &Context,
    fd: libc::c_int,
    stop: libc::c_int,
    port_num: u8,
    spec: &str,
    health: &Health,
    mtu: Option<MtuSource>,
) {
    let mut last_mtu = mtu.as_ref().map(|m| m.mtu);
    loop {
        let mut fds = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two valid pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, if mtu.is_some() { 250 } else { -1 }) };
        if let (Some(m), Some(last)) = (&mtu, last_mtu) {
            let now = std::fs::read_to_string(&m.path)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            if let Some(now) = now.filter(|&v| v != last && v > 0) {
                last_mtu = Some(now);
                health.max_frame.store(now + 18, Ordering::Release);
                health.signal(None, attention::MTU_CHANGED, false);
                log::info!(
                    "{spec}: MTU {last} -> {now}; the send queues take frames of up to {} bytes",
                    now + 18
                );
            }
        }
        if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        if n < 0 || fds[1].revents != 0 {
            break;
        }
        while let Some((ty, port, element)) = ctx.next_async_event() {
            match ty {
                // Said once, however often the device repeats it.
                IBV_EVENT_DEVICE_FATAL => {
                    if !health.fatal.swap(true, Ordering::AcqRel) {
                        log::warn!(
                            "{spec}: the device reported a fatal error (IBV_EVENT_DEVICE_FATAL); its queues are stopped"
                        );
                    }
                    health.signal(None, attention::DEVICE_FATAL, false);
                }
                IBV_EVENT_PORT_ERR | IBV_EVENT_PORT_ACTIVE if port == i32::from(port_num) => {
                    health.port_events.fetch_add(1, Ordering::Relaxed);
                    let down = ty == IBV_EVENT_PORT_ERR;
                    health.link_down.store(down, Ordering::Release);
                    health.signal(None, attention::LINK_DOWN, !down);
                    log::info!("{spec}: link {} (port {port_num})", if down { "down" } else { "up" });
                }
                IBV_EVENT_CQ_ERR if health.signal(Some(element), attention::CQ_ERROR, false) > 0 => {
                    log::warn!("{spec}: a queue's CQ is in error (IBV_EVENT_CQ_ERR, an overrun); the queue fails");
                }
                IBV_EVENT_WQ_FATAL | IBV_EVENT_QP_FATAL | IBV_EVENT_QP_REQ_ERR | IBV_EVENT_QP_ACCESS_ERR
                    if health.signal(Some(element), attention::QUEUE_FATAL, false) > 0 =>
                {
                    log::warn!("{spec}: the device reported a queue broken (async event {ty}); it is reset");
                }
                _ => {}
            }
        }
    }
    // SAFETY: the read end of our pipe, closed once here.
    unsafe { libc::close(stop) };
}
