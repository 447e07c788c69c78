// Declarations of the raw imports of sluice:handler@0.2.0 as componentize-js
// 0.23 binds them (u64 and s64 are BigInt; a `result` error is thrown). The
// SDK is written on these; a handler using the SDK never imports them.

declare module 'sluice:handler/log@0.2.0' {
  export function log(level: 'trace' | 'debug' | 'info' | 'warn' | 'error', message: string): void;
}

declare module 'sluice:handler/publish@0.2.0' {
  export interface PublishOptions {
    headers: [string, string][];
    key: string | undefined;
    delayMs: bigint | undefined;
  }
  export function publish(queue: string, payload: Uint8Array, options: PublishOptions): void;
  export function publishToTopic(topic: string, route: string, payload: Uint8Array, options: PublishOptions): number;
}

declare module 'sluice:handler/config@0.2.0' {
  export function get(key: string): string | undefined;
  export function getAll(): [string, string][];
}

declare module 'sluice:handler/kv@0.2.0' {
  export function get(key: string): Uint8Array | undefined;
  export function set(key: string, value: Uint8Array, ttlMs: bigint | undefined): void;
  function delete_(key: string): boolean;
  export { delete_ as delete };
  export function increment(key: string, delta: bigint): bigint;
}

declare module 'sluice:handler/lease@0.2.0' {
  export function timeLeft(): bigint;
  export function extend(ms: bigint): bigint;
}
