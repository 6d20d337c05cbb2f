"""The federated engine: messages, clients, strategies, server and engines.

One protocol for four model families (see docs/architecture.md): a server broadcasts
an :class:`Instruction` with the global state; each client answers with an
:class:`Update` whose ``kind`` says what it carries (gradients, weights, sparse rows
or sufficient statistics); a strategy validates and aggregates the updates into the
next global state. Engines only move these messages.
"""
