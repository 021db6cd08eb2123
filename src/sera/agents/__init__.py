"""Action protocols: how replies are parsed and observations written."""
