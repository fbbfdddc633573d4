"Connection types, installed as consfig.connections."
