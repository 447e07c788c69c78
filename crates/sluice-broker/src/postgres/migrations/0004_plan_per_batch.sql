-- Version 4 of the schema, over version 3: the functions the
-- broker calls with whole batches (settle and what it calls, claim,
-- extend, and unblock with the dead letters a purge took) plan each call
-- for its own batch.
--
-- PostgreSQL plans each statement of a PL/pgSQL function afresh for the
-- function's first five calls in a session, then may keep one generic
-- plan, made without the arguments' values. For a statement over
-- unnest(an array argument) that plan assumes ten elements, however many
-- the batch holds, and chooses its joins for ten: a settle of a thousand
-- deliveries joined its rows each with each. So every settle after the
-- fifth on a broker connection cost time in proportion to the square of
-- its batch, and a drain slowed down once each connection of the pool had
-- settled five times (a 50,000-message drain hardly did; one of 200,000
-- ran at a third of the rate it has with this version). A plan made for
-- the call's own arguments costs a few hundred microseconds a batch.
--
-- enqueue and enqueue_grouped keep the generic plans: publish() calls them
-- with one message from an application's own transaction, where planning
-- every call would cost more than the insert (about 100 against 250
-- microseconds a publish, 390 against 670 to an ordered queue). A batch
-- of 5,000 messages to an ordered queue took as long either way, and
-- enqueue's own insert has no join a plan could get wrong. (Called from
-- settle, for the messages a handler published, they plan each call as
-- settle does: a function's setting holds for what it calls.)
--
-- Settings given with ALTER FUNCTION hold until a CREATE OR REPLACE of the
-- function: a later version that replaces one of these must set it again.
ALTER FUNCTION settle SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION settle_apply SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION settle_each SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION claim SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION extend SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION groups_left SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION unblock SET plan_cache_mode = force_custom_plan;
