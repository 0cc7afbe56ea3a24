//! Trace time and placement of clocks with no path (in progress).
