-- Version 4 of the queue role's schema, over version 3: the functions that
-- take a batch as arrays plan each call for its own batch.
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
-- ran at a third of its first seconds' rate). A plan made for the call's
-- own arguments costs a few hundred microseconds a batch.
--
-- Settings given with ALTER FUNCTION hold until a CREATE OR REPLACE of the
-- function: a later version that replaces one of these must set it again.
ALTER FUNCTION settle SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION settle_apply SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION settle_each SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION claim SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION extend SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION enqueue SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION enqueue_grouped SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION groups_left SET plan_cache_mode = force_custom_plan;
ALTER FUNCTION unblock SET plan_cache_mode = force_custom_plan;
