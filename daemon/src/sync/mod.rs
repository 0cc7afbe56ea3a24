//! Clock sync, host side: host-initiated four-timestamp probes on the UDP
//! sync socket and the per-relay offset estimator.
