// Lets node run the guests natively for unit tests: the WIT imports
// ('sluice:handler/log@0.2.0', ...) all resolve to the fake host in
// fake-host.mjs. Used as `node --import ./test/register.mjs --test`.
import { register } from 'node:module';

register(
  'data:text/javascript,' +
    encodeURIComponent(`
      const fake = ${JSON.stringify(new URL('./fake-host.mjs', import.meta.url).href)};
      export async function resolve(specifier, context, next) {
        if (specifier.startsWith('sluice:handler/')) return { url: fake, shortCircuit: true };
        return next(specifier, context);
      }
    `),
);
