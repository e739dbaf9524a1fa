//! A reconciler built against a future `leasehold:plugin@0.2.0`: the host (0.1.0) must name the
//! version it expected instead of loading it.

wit_bindgen::generate!({
    inline: "
        package leasehold:plugin@0.2.0;
        interface log {
            enum level { trace, debug, info, warn, error }
            log: func(level: level, message: string);
        }
        world reconciler {
            import log;
            export init: func(config: list<tuple<string, string>>) -> result<_, string>;
            export reconcile: func() -> result<_, string>;
        }
    ",
});

use leasehold::plugin::log;

struct FromTheFuture;

impl Guest for FromTheFuture {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        log::log(log::Level::Info, "a reconciler from WIT 0.2.0");
        Ok(())
    }

    fn reconcile() -> Result<(), String> {
        Ok(())
    }
}

export!(FromTheFuture);
