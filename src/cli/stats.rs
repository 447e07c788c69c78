//! `sluice stats`.

use anyhow::Result;

use super::Context;

pub async fn stats(ctx: &Context) -> Result<()> {
    let broker = ctx.broker().await?;
    let all = broker.stats().await?;
    if ctx.json {
        for q in &all {
            super::print_json(q)?;
        }
        return Ok(());
    }
    println!(
        "{:<24} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "QUEUE", "READY", "DELAYED", "IN_FLIGHT", "DONE", "DUPLICATES", "RETRIED", "DEAD"
    );
    for q in &all {
        println!(
            "{:<24} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9}",
            q.queue, q.ready, q.delayed, q.in_flight, q.done, q.duplicates, q.retried, q.dead
        );
    }
    Ok(())
}
