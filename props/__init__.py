"The property library, installed as consfig.props."
