"""Security: who a connection is (principals, authentication state) and what it may do
(the authorizer). Pure types and rules; the server applies them (issue 14 adds TLS, SASL
mechanisms and ACLs on top of these seams)."""
