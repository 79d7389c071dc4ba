"""fxrules inside other tools: ``torch.compile`` (a Dynamo backend and an
Inductor pass) and pytest (rule files as test items).
"""
