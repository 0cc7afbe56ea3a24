//! Trace sources: each turns some producer's output into TracePacket bytes
//! for the spool.
