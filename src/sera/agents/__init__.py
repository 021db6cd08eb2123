"""Reply protocols: how agents' replies are parsed and observations written (`codeact`,
`text_protocol`), where a reply launches children (`launch_spans`), and each protocol's facts as
one record (`protocol.ReplyProtocol`)."""
