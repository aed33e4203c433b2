"""dgmoe.engine"""
