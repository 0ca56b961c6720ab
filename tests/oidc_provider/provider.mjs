// provider.mjs: a real OpenID Connect provider (oidc-provider, the certified one for Node.js) for
// polymath-host's tests of trusted issuers (issue 37).
//
//   node provider.mjs '{"audience": "https://library.test", "redirectUris": ["http://127.0.0.1:8080/"]}'
//
// It listens on 127.0.0.1 (a free port unless "port" is given), prints one JSON line
// {"issuer": "http://127.0.0.1:PORT", "kids": [...]} once it answers, and serves:
//
// - JWT access tokens (RFC 9068) for the resource `audience` (scope `library`), with a `groups`
//   claim: the client-credentials clients `members-machine` (secret `members-secret`, groups
//   ["members"]) and `free-machine` (`free-secret`, ["free"]); for people signed in through the
//   public client `library-page` (authorization code + PKCE, no secret, the given redirect URIs),
//   the login `alice` is in ["members"] and anyone else in ["free"];
// - its login and consent screens (oidc-provider's development interactions: any password);
// - POST /test/rotate: a new signing key, published first, the old ones still published (new
//   tokens carry the new kid); answers {"kids": [...]}.
//
// Keys are RSA 2048 (RS256), made at start with node:crypto. Nothing is written to disk.

import { generateKeyPairSync, randomUUID } from "node:crypto";
import http from "node:http";
import Provider from "oidc-provider";

const options = JSON.parse(process.argv[2] || "{}");
const audience = options.audience || "https://library.test";
const ttl = options.accessTokenTTL || 600;
const GROUPS = { "members-machine": ["members"], "free-machine": ["free"], alice: ["members"] };

function newKey() {
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  return { ...privateKey.export({ format: "jwk" }), kid: randomUUID(), alg: "RS256", use: "sig" };
}

let keys = [newKey()];
let provider;

function configuration() {
  return {
    clients: [
      { client_id: "members-machine", client_secret: "members-secret", grant_types: ["client_credentials"],
        redirect_uris: [], response_types: [] },
      { client_id: "free-machine", client_secret: "free-secret", grant_types: ["client_credentials"],
        redirect_uris: [], response_types: [] },
      { client_id: "library-page", token_endpoint_auth_method: "none", grant_types: ["authorization_code"],
        response_types: ["code"], redirect_uris: options.redirectUris || [] },
    ],
    jwks: { keys },
    cookies: { keys: ["polymath-host tests: not a secret"] },
    features: {
      clientCredentials: { enabled: true },
      devInteractions: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => audience,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: "library",
          audience,
          accessTokenFormat: "jwt",
          accessTokenTTL: ttl,
          jwt: { sign: { alg: "RS256" } },
        }),
      },
    },
    scopes: ["openid", "library"],
    pkce: { required: () => true },
    extraTokenClaims: (ctx, token) => ({ groups: GROUPS[token.accountId || token.clientId] || ["free"] }),
    findAccount: (ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
    clientBasedCORS: (ctx, origin, client) => client.redirectUris.some((uri) => new URL(uri).origin === origin),
  };
}

function build(issuer) {
  provider = new Provider(issuer, configuration());
}

const server = http.createServer((request, response) => {
  if (request.method === "POST" && request.url === "/test/rotate") {
    keys = [newKey(), ...keys]; // the new key signs; the old ones stay published, as providers rotate
    build(provider.issuer);
    response.setHeader("Content-Type", "application/json");
    response.end(JSON.stringify({ kids: keys.map((key) => key.kid) }));
    return;
  }
  provider.callback()(request, response);
});

server.listen(options.port || 0, "127.0.0.1", () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  build(issuer);
  console.log(JSON.stringify({ issuer, kids: keys.map((key) => key.kid) }));
});

for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => server.close(() => process.exit(0)));
