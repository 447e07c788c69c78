// Lets node run the SDK natively for tests: each WIT import
// ('sluice:handler/kv@0.2.0', ...) loads as a module re-exporting that
// interface of the fake host in fake-host.mjs. Used as
// `node --import ./test/register.mjs --test`.
import { register } from 'node:module';

register(
  'data:text/javascript,' +
    encodeURIComponent(`
      const fake = ${JSON.stringify(new URL('./fake-host.mjs', import.meta.url).href)};
      const WIT = /^sluice:handler\\/([a-z]+)@0\\.2\\.0$/;
      export async function resolve(specifier, context, next) {
        const m = WIT.exec(specifier);
        if (m) return { url: 'sluice-fake:' + m[1], shortCircuit: true };
        return next(specifier, context);
      }
      export async function load(url, context, next) {
        if (!url.startsWith('sluice-fake:')) return next(url, context);
        const iface = url.slice('sluice-fake:'.length);
        const { host } = await import(fake);
        const names = Object.keys(host[iface] ?? {});
        const source = [
          'import { host } from ' + JSON.stringify(fake) + ';',
          ...names.map((n, i) => 'const f' + i + ' = host.' + iface + '[' + JSON.stringify(n) + '];'),
          'export { ' + names.map((n, i) => 'f' + i + ' as ' + n).join(', ') + ' };',
        ].join('\\n');
        return { format: 'module', source, shortCircuit: true };
      }
    `),
);
