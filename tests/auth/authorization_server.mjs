// Loopback OAuth 2.1 authorization server for taskmesh's auth integration tests.
//
// It wraps the npm package `oidc-provider`, an implementation independent of
// taskmesh, so the tests check taskmesh's resource-server side against tokens
// that taskmesh did not mint itself. What is used: the client credentials
// grant, RFC 8707 resource indicators, JWT access tokens (RFC 9068) and token
// introspection (RFC 7662). No interactions, no sessions, no cookies.
//
// `import('oidc-provider')` is resolved from this file's own directory upwards
// (ES modules ignore NODE_PATH), so run a copy of this file placed next to a
// node_modules that holds oidc-provider, e.g. in a scratch directory after
// `npm install --no-audit --no-fund oidc-provider@9.13.3`.
//
// Written against: oidc-provider@9.13.3 (resolved with jose@6.2.19,
// koa@3.3.0, debug@4.4.3), run on Node 20.20.2. oidc-provider 9 asks for
// Node 22 LTS and prints an "Unsupported runtime" warning on Node 20 (to
// stderr); it works on 20.20. The script imports nothing else from npm; keys
// come from node:crypto.
//
// Usage:   node authorization_server.mjs <port> <resource-uri>
//   <port>          TCP port on 127.0.0.1 (0 picks a free one; the chosen port
//                   is in the printed issuer). Nothing listens on any other address.
//   <resource-uri>  the resource indicator of the taskmesh server under test
//                   (absolute URI, no fragment), e.g. http://127.0.0.1:8080/mcp
//
// Issuer: http://127.0.0.1:<port>. When ready, prints one line of JSON to
// stdout and nothing else is ever written there:
//   {"issuer":...,"token_endpoint":...,"jwks_uri":...,"introspection_endpoint":...}
// (values taken from the provider's own discovery document). Logs go to stderr.
// Exits on SIGTERM, SIGINT, and when stdin reaches end of file, so the parent
// must hand it a pipe on stdin and keep it open (with stdin from /dev/null it
// exits at once).
//
// Resources (the `resource` parameter must match one of these exactly):
//   <resource-uri>            JWT access tokens, aud = <resource-uri>
//   <resource-uri>-opaque     OPAQUE access tokens, for introspection. A
//                             `#opaque` fragment cannot be used: oidc-provider
//                             rejects resource indicators with a fragment.
//   http://127.0.0.1:1/other  JWT access tokens for some other audience
// Anything else gives `invalid_target`. Without `resource` the provider issues
// an opaque token with no audience.
// Scopes on offer: tasks:create tasks:read tasks:cancel tasks:list taskmesh:worker. Ask for them
// with `scope`; a request without `scope` gets a token with no scope at all.
//
// Clients (grant type client_credentials only; client_secret_basic and
// client_secret_post both accepted):
//   cc-rs256    / secret-rs256-0123456789      all scopes, JWTs signed RS256
//   cc-es256    / secret-es256-0123456789      all scopes, ES256
//   cc-eddsa    / secret-eddsa-0123456789      all scopes, EdDSA (Ed25519)
//   cc-reader   / secret-reader-0123456789     tasks:read only (asking for more
//                                              is refused: invalid_scope), RS256
//   cc-short    / secret-short-0123456789      all scopes, RS256, tokens live 1 s
//   cc-worker   / secret-worker-0123456789     taskmesh:worker only (a worker's
//                                              credential), RS256
//   cc-opaque   / secret-opaque-0123456789     all scopes; its tokens are OPAQUE for
//                                              every resource (aud = the resource,
//                                              checked through introspection)
//   taskmesh-rs / secret-introspect-0123456789 the resource server: may
//                                              introspect any token whose aud is
//                                              <resource-uri> or its -opaque twin.
//                                              Gets no tokens for those resources.
// All other tokens last 600 s. Every other client may introspect only its own
// tokens.
//
// JWT access tokens (header typ "at+jwt", kid of the signing key) carry
// iss, aud (a string), sub = client_id = the client id, scope, iat, exp, jti.
// Introspection of an opaque token answers
//   {"active":true,"sub":<client id>,"client_id":<client id>,"exp":..,"iat":..,
//    "iss":<issuer>,"aud":<resource>,"scope":"...","token_type":"Bearer"}
// or {"active":false}. JWTs cannot be introspected (the provider answers 400
// unsupported_token_type).
//
// Signing keys are made fresh at every start: RSA 2048 (kid "rsa-1", RS256),
// P-256 (kid "ec-1", ES256), Ed25519 (kid "ed-1", EdDSA); the JWKS endpoint
// publishes their public halves.

import * as crypto from 'node:crypto';
import * as http from 'node:http';

// oidc-provider prints its notices with console.info, i.e. to stdout. Stdout is
// reserved for the one JSON line, so everything the console says goes to stderr.
// This must happen before the package is loaded, hence the dynamic import below.
console.log = console.error;
console.info = console.error;
console.debug = console.error;

const { default: Provider, errors } = await import('oidc-provider');

function fail(message) {
  console.error(`authorization_server: ${message}`);
  process.exit(2);
}

const [portArg, resourceArg] = process.argv.slice(2);
if (portArg === undefined || resourceArg === undefined) {
  fail('usage: node authorization_server.mjs <port> <resource-uri>');
}
const port = Number(portArg);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  fail(`bad port ${JSON.stringify(portArg)}`);
}
const resourceUri = resourceArg;
{
  const parsed = URL.parse(resourceUri);
  if (parsed === null || parsed.href.includes('#')) {
    fail(`resource URI must be absolute and without a fragment: ${JSON.stringify(resourceUri)}`);
  }
}
const opaqueResourceUri = `${resourceUri}-opaque`;
const otherResourceUri = 'http://127.0.0.1:1/other';

const ALL_SCOPES = ['tasks:create', 'tasks:read', 'tasks:cancel', 'tasks:list'];
const WORKER_SCOPE = 'taskmesh:worker';
const RESOURCE_SERVER_CLIENT = 'taskmesh-rs';
const DEFAULT_TTL_SECONDS = 600;

// Clients that obtain tokens: allowed scopes, JWT signing algorithm, lifetime.
const TOKEN_CLIENTS = new Map([
  ['cc-rs256', { secret: 'secret-rs256-0123456789', scopes: ALL_SCOPES, alg: 'RS256' }],
  ['cc-es256', { secret: 'secret-es256-0123456789', scopes: ALL_SCOPES, alg: 'ES256' }],
  ['cc-eddsa', { secret: 'secret-eddsa-0123456789', scopes: ALL_SCOPES, alg: 'EdDSA' }],
  ['cc-reader', { secret: 'secret-reader-0123456789', scopes: ['tasks:read'], alg: 'RS256' }],
  ['cc-short', { secret: 'secret-short-0123456789', scopes: ALL_SCOPES, alg: 'RS256', ttl: 1 }],
  ['cc-opaque', { secret: 'secret-opaque-0123456789', scopes: ALL_SCOPES, alg: 'RS256', opaque: true }],
  ['cc-worker', { secret: 'secret-worker-0123456789', scopes: [WORKER_SCOPE], alg: 'RS256' }],
]);

const clients = [
  ...[...TOKEN_CLIENTS].map(([id, c]) => ({
    client_id: id,
    client_secret: c.secret,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
    scope: c.scopes.join(' '),
  })),
  {
    client_id: RESOURCE_SERVER_CLIENT,
    client_secret: 'secret-introspect-0123456789',
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
    token_endpoint_auth_method: 'client_secret_basic',
  },
];

// Fresh signing keys for this run, as private JWKs for the provider's keystore.
function signingJwk(type, options, kid, alg) {
  const { privateKey } = crypto.generateKeyPairSync(type, options);
  return { ...privateKey.export({ format: 'jwk' }), kid, alg, use: 'sig' };
}
const jwks = {
  keys: [
    signingJwk('rsa', { modulusLength: 2048 }, 'rsa-1', 'RS256'),
    signingJwk('ec', { namedCurve: 'P-256' }, 'ec-1', 'ES256'),
    signingJwk('ed25519', undefined, 'ed-1', 'EdDSA'),
  ],
};

function audienceOf(token) {
  return Array.isArray(token.aud) ? token.aud : [token.aud];
}

const configuration = {
  clients,
  jwks,
  clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
  scopes: ['openid', 'offline_access', ...ALL_SCOPES, WORKER_SCOPE],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    introspection: {
      enabled: true,
      // Who may learn about which token: the resource server about tokens
      // meant for it, every other client about its own tokens only.
      async allowedPolicy(_ctx, caller, token) {
        if (caller.clientId === token.clientId) return true;
        if (caller.clientId === RESOURCE_SERVER_CLIENT) {
          return audienceOf(token).some((aud) => aud === resourceUri || aud === opaqueResourceUri);
        }
        return false;
      },
    },
    resourceIndicators: {
      enabled: true,
      // Called for every `resource` value on a token request; the token's scope
      // becomes (requested scopes) ∩ (scope returned here).
      async getResourceServerInfo(_ctx, resourceIndicator, client) {
        const entry = TOKEN_CLIENTS.get(client.clientId);
        if (entry === undefined) throw new errors.InvalidTarget();
        const common = {
          scope: entry.scopes.join(' '),
          audience: resourceIndicator,
          accessTokenTTL: entry.ttl,
        };
        switch (resourceIndicator) {
          case resourceUri:
          case otherResourceUri:
            if (entry.opaque) return { ...common, accessTokenFormat: 'opaque' };
            return { ...common, accessTokenFormat: 'jwt', jwt: { sign: { alg: entry.alg } } };
          case opaqueResourceUri:
            return { ...common, accessTokenFormat: 'opaque' };
          default:
            throw new errors.InvalidTarget();
        }
      },
    },
  },
  // JWT access tokens already get sub = client id; opaque ones get nothing, so
  // put it in the token's extra claims, which introspection echoes.
  async extraTokenClaims(_ctx, token) {
    if (token.kind === 'ClientCredentials' && !token.accountId) {
      return { sub: token.clientId };
    }
    return undefined;
  },
  ttl: {
    ClientCredentials(_ctx, token, client) {
      return token.resourceServer?.accessTokenTTL
        ?? TOKEN_CLIENTS.get(client.clientId)?.ttl
        ?? DEFAULT_TTL_SECONDS;
    },
  },
};

// Listen first (so port 0 works), then build the provider with the real issuer.
let handler = (_req, res) => {
  res.statusCode = 503;
  res.end();
};
const server = http.createServer((req, res) => handler(req, res));
server.on('error', (err) => fail(`server error: ${err.message}`));
await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, configuration);
provider.use(async (ctx, next) => {
  await next();
  console.error(`authorization_server: ${ctx.method} ${ctx.path} -> ${ctx.status}`);
});
for (const event of ['server_error', 'grant.error', 'introspection.error', 'jwks.error', 'discovery.error']) {
  provider.on(event, (_ctx, err) => {
    console.error(`authorization_server: ${event}: ${err?.message ?? err}${err?.error_description ? ` (${err.error_description})` : ''}`);
  });
}
handler = provider.callback();

function shutdown(why) {
  console.error(`authorization_server: exiting (${why})`);
  server.close();
  server.closeAllConnections?.();
  process.exit(0);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
process.stdin.on('end', () => shutdown('stdin closed'));
process.stdin.on('close', () => shutdown('stdin closed'));
process.stdin.on('error', () => shutdown('stdin error'));
process.stdin.resume();

const discoveryResponse = await fetch(`${issuer}/.well-known/openid-configuration`);
if (!discoveryResponse.ok) fail(`discovery answered ${discoveryResponse.status}`);
const discovery = await discoveryResponse.json();
const ready = {
  issuer: discovery.issuer,
  token_endpoint: discovery.token_endpoint,
  jwks_uri: discovery.jwks_uri,
  introspection_endpoint: discovery.introspection_endpoint,
};
for (const [key, value] of Object.entries(ready)) {
  if (typeof value !== 'string') fail(`discovery document has no ${key}`);
}
process.stdout.write(`${JSON.stringify(ready)}\n`);
