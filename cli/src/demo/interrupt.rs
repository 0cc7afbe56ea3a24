//! Ctrl-C (SIGINT) and SIGTERM during a live demo: a handler sets a flag
//! the demo looks at every 100 ms, so it stops its daemon and relays itself
//! and ends at once with 130, whether or not they got the signal too (a
//! terminal sends it to the whole process group; `kill` to the demo
//! alone). The processes it starts keep the default handling.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use signal_hook::consts::{SIGINT, SIGTERM};

/// Whether SIGINT or SIGTERM came.
#[derive(Clone, Debug)]
pub struct Interrupt {
    came: Arc<AtomicBool>,
}

impl Interrupt {
    /// Installs the handlers (for the rest of the process's life).
    pub fn install() -> std::io::Result<Self> {
        let came = Arc::new(AtomicBool::new(false));
        for signal in [SIGINT, SIGTERM] {
            signal_hook::flag::register(signal, Arc::clone(&came))?;
        }
        Ok(Self { came })
    }

    pub fn came(&self) -> bool {
        self.came.load(Ordering::SeqCst)
    }
}
