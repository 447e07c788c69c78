//! `sluice check FILE.wasm`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::Context;
use crate::base::files::read_regular;
use crate::error::chain;
use crate::sandbox::runtime::Runtime;
use crate::units::format_size;

/// The arguments of `sluice check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The component to check.
    pub(crate) file: PathBuf,
}

pub(crate) fn check(ctx: &Context, args: CheckArgs) -> Result<()> {
    let limit = ctx.config.max_component_size();
    let bytes = read_regular(&args.file, limit, "raise max_component_size in sluice.toml")
        .map_err(|e| anyhow::anyhow!(chain(&e)))?;
    let runtime = Runtime::new()?;
    let report = crate::sandbox::check::check(&runtime, &bytes)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    if ctx.json {
        return super::print_json(&report);
    }
    outln!(
        "{}: ok, implements {} ({})",
        args.file.display(),
        report.world,
        format_size(report.size)
    );
    for import in &report.imports {
        match crate::sandbox::check::refusal(import) {
            Some(reason) => outln!("  import {import}  (refused: {reason})"),
            None => outln!("  import {import}"),
        }
    }
    for export in &report.exports {
        outln!("  export {export}");
    }
    if report.world == crate::sandbox::runtime::World::HandlerV1.name() {
        outln!(
            "  built for sluice:handler@0.1.0: served as it is; rebuild against 0.2.0 for snooze, the lease imports and batches (docs/handlers.md, \"Upgrading from 0.1.0\")"
        );
    }
    if !report.refused.is_empty() {
        outln!(
            "  {} import(s) link but their use is refused, for the reasons above; only the key-value store and outgoing HTTP can be granted, under [capabilities] in the handler's sidecar",
            report.refused.len()
        );
    }
    Ok(())
}
