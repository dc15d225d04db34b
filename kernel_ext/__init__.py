"""IPython extension: ``%submit`` / ``%%submit`` magics and job widgets.

It talks to the service only through ``labhive.client``.
"""
