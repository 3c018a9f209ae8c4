//! Asynchronous events: queued by the controller, delivered through outstanding Asynchronous
//! Event Requests. An event type stays masked after delivery until the host reads its log page
//! (the spec's rule, which keeps a host from being flooded).

use fabrik_proto::nvme::features::aec;
use fabrik_proto::nvme::log::{aen, lid};
use fabrik_proto::nvme::reservation;
use fabrik_proto::Status;

use super::queue::Response;
use super::{limits, Controller};

impl Controller {
    /// Queues a notice if the host enabled it in Asynchronous Event Configuration.
    pub(super) fn queue_notice(&self, enable_bit: u32, info: u8, log_page: u8) {
        if self.state.lock().unwrap().async_event_config & enable_bit == 0 {
            return;
        }
        self.queue_event(aen::result(aen::TYPE_NOTICE, info, log_page));
    }

    /// Queues an event (once: an event already pending is not repeated).
    pub(super) fn queue_event(&self, event: u32) {
        let mut st = self.state.lock().unwrap();
        if !st.pending_events.contains(&event) {
            st.pending_events.push_back(event);
        }
        drop(st);
        self.events.notify_waiters();
    }

    /// A namespace of this controller's subsystem was added, removed or changed.
    pub fn namespace_changed(&self, nsid: u32) {
        for cache in self.namespace_caches.lock().unwrap().iter() {
            cache.forget(nsid);
        }
        {
            let mut st = self.state.lock().unwrap();
            if !st.changed_namespaces.contains(&nsid) {
                st.changed_namespaces.push(nsid);
            }
        }
        self.queue_notice(
            aec::NS_ATTR_NOTICES,
            aen::NOTICE_NS_ATTR_CHANGED,
            lid::CHANGED_NS_LIST,
        );
    }

    /// The discovery log changed (discovery controllers only).
    pub fn discovery_log_changed(&self) {
        if self.is_discovery() {
            self.queue_notice(
                aec::DISCOVERY_LOG_CHANGE_NOTICES,
                aen::NOTICE_DISCOVERY_LOG_CHANGED,
                lid::DISCOVERY,
            );
        }
    }

    /// Takes the changed namespace list (reading the log clears it and unmasks the event).
    pub(super) fn take_changed_namespaces(&self, retain: bool) -> Vec<u32> {
        let mut st = self.state.lock().unwrap();
        if retain {
            return st.changed_namespaces.clone();
        }
        st.masked_event_types &= !(1 << aen::TYPE_NOTICE);
        std::mem::take(&mut st.changed_namespaces)
    }

    /// Unmasks the events a log page reports once it was read without RAE.
    pub(super) fn log_page_read(&self, log: u8, retain: bool) {
        let event_type = match log {
            lid::DISCOVERY | lid::CHANGED_NS_LIST | lid::ANA => aen::TYPE_NOTICE,
            reservation::NOTIFICATION_LOG => aen::TYPE_IO_COMMAND_SET,
            _ => return,
        };
        if !retain {
            self.state.lock().unwrap().masked_event_types &= !(1 << event_type);
            self.events.notify_waiters();
        }
    }

    /// Checks the AER limit when the command is admitted.
    pub(super) fn admit_aer(&self) -> Result<(), Status> {
        if self.state.lock().unwrap().outstanding_aers >= limits::AER_LIMIT {
            return Err(Status::AER_LIMIT_EXCEEDED);
        }
        Ok(())
    }

    /// An Asynchronous Event Request: completes when an unmasked event is pending. Stays pending
    /// otherwise (it never times out); dropped with its queue.
    pub(super) async fn async_event_request(&self) -> Response {
        struct Outstanding<'a>(&'a Controller);
        impl Drop for Outstanding<'_> {
            fn drop(&mut self) {
                self.0.state.lock().unwrap().outstanding_aers -= 1;
            }
        }
        self.state.lock().unwrap().outstanding_aers += 1;
        let _slot = Outstanding(self);
        loop {
            let notified = self.events.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.state.lock().unwrap();
                let masked = st.masked_event_types;
                if let Some(pos) = st
                    .pending_events
                    .iter()
                    .position(|e| masked & (1 << (e & 0x7)) == 0)
                {
                    let event = st.pending_events.remove(pos).unwrap();
                    st.masked_event_types |= 1 << (event & 0x7);
                    return Response::result(event as u64);
                }
            }
            notified.await;
        }
    }
}
